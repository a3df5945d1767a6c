"""The runs store: measured runs beside every estimate (docs/runs.md).

schema (RunRecord), store (RunsStore: add/get/query/delete/export_json), migrate + migrations (Alembic, run on
open), ingest / bundled / megatron_log / training (the ways in), checks, estimate (the planner's estimate of a
run), calibration + fit (the step-time terms fitted on runs), advice (plan and recommend beside the store),
published (NVIDIA's rows as runs of source "published").
"""
