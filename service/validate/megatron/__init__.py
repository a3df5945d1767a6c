"""Megatron Bridge and Megatron-LM dialects (service/validate/megatron/dialect.py)."""
