"""The keys each dataset kind takes where a config writes it without a ``_target_`` (a Megatron Bridge preset:
``preset: squad``), the free-form case the near-miss rule (RA-D005) reads. A ``_target_`` dataset's keys are its
signature's (RA-S002).
"""

from __future__ import annotations

# This product's own: trainer/contract/config.py DatasetSection and the keys the planner, validate and the
# Bridge command read (service/recommend/bridge_command.py, trainer/contract/builders.py).
PRODUCT_KEYS = ("seq_length", "preset", "packed_sequence", "tokenizer", "path", "num_samples", "split")

# Megatron Bridge's dataset configs (pinned 067f987): data/base.py DataloaderConfig; training/config.py
# GPTDatasetConfig; data/builders/gpt_sft.py GPTSFTDatasetConfig, FinetuningDatasetConfig;
# data/builders/direct_hf_sft.py DirectHFSFTDatasetConfig.
BRIDGE_KEYS = (
    "dataloader_type", "num_workers", "data_sharding", "pin_memory", "drop_last", "persistent_workers",
    "trust_remote_code", "dataloader_save", "dataloader_load",
    "blend_seed", "collate_impl", "config", "data_path", "dataset_kwargs", "dataset_root",
    "defer_in_batch_packing_to_step", "do_test", "do_validation", "enable_in_batch_packing", "enable_offline_packing",
    "examples", "hf_dataset", "hf_output_root", "hf_processor_kwargs", "hf_processor_path", "hf_rewrite",
    "hf_test_dataset", "hf_validation_dataset", "hf_validation_proportion", "in_batch_packing_pad_to_multiple_of",
    "is_test", "max_train_samples", "memmap_workers", "offline_packing_specs", "output_name", "pack_metadata_path",
    "packed_sequence_size", "pad_cu_seqlens", "pad_seq_to_mult", "pad_to_max_length", "pad_to_multiple_of",
    "per_dataset_sequences_path", "preprocessing", "processor", "root", "seed",
    "skip_getting_attention_mask_from_dataset",
    "source", "source_weights", "target_length", "test_source", "validation_source",
)
# Megatron-Core's BlendedMegatronDatasetConfig and GPTDatasetConfig (megatron/core/datasets/), which Bridge's
# GPTDatasetConfig inherits. `sequence_length` is left out: this product reads `seq_length`, so a config of its
# own that writes `sequence_length` trains at the default length (Bridge takes either).
MCORE_KEYS = (
    "add_extra_token_to_sequence", "allow_ambiguous_pad_tokens", "blend", "blend_per_split", "create_attention_mask",
    "defer_npy_index_mmap", "drop_last_partial_validation_sequence", "eod_mask_loss", "fast_cache_load",
    "full_validation", "mid_level_dataset_surplus", "mmap_bin_files", "mock", "multiple_validation_sets",
    "num_dataset_builder_threads", "object_storage_cache_path", "path_to_cache", "random_seed",
    "reset_attention_mask", "reset_position_ids", "split_matrix",
)

PRESET_KEYS = frozenset(PRODUCT_KEYS + BRIDGE_KEYS + MCORE_KEYS)
