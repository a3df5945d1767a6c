"""The sections and keys AutoModel's LLM recipes take, as its config classes define them.

Written from AutoModel's documentation and the dataclasses and signatures its recipes build from
(``parse_distributed_section``, ``FSDP2Config``, ``MegatronFSDPConfig``, ``DDPConfig``, ``PipelineConfig``,
``MoEParallelizerConfig``, ``StepScheduler``, ``initialize_distributed``); nothing is imported. Only
sections AutoModel itself checks are strict: it raises on an unknown strategy option or a keyword its
step scheduler does not take, while other top-level sections are read by name and extra ones ignored.
"""

from __future__ import annotations

# The parallel sizes `distributed:` takes next to the strategy (AutoModel's ParallelismSizes).
SIZE_KEYS = ("dp_size", "dp_replicate_size", "tp_size", "pp_size", "cp_size", "ep_size")
# Read by parse_distributed_section itself; Hydra's meta keys (a legacy `_target_: ...FSDP2Manager`) are dropped.
DISTRIBUTED_COMMON = frozenset(SIZE_KEYS) | {"strategy", "pipeline", "moe", "activation_checkpointing",
                                              "_target_", "_recursive_", "_convert_"}
# Everything else under `distributed:` goes to the strategy's config class, which refuses unknown options.
STRATEGY_OPTIONS = {
    "fsdp2": frozenset({
        "sequence_parallel", "tp_plan", "patch_is_packed_sequence", "mp_policy", "offload_policy",
        "autocast_dtype", "activation_checkpointing_scope", "defer_fsdp_grad_sync", "reshard_after_forward",
        "enable_async_tensor_parallel", "enable_compile", "enable_fsdp2_prefetch", "fsdp2_backward_prefetch_depth",
        "fsdp2_forward_prefetch_depth", "multimodal"}),
    "megatron_fsdp": frozenset({
        "megatron_fsdp_unit_modules", "zero_dp_strategy", "init_fsdp_with_meta_device", "grad_reduce_in_fp32",
        "preserve_fp32_weights", "overlap_grad_reduce", "overlap_param_gather", "check_for_nan_in_grad",
        "report_nan_in_param_grad", "average_in_collective", "disable_bucketing", "calculate_per_token_loss",
        "keep_fp8_transpose_cache", "nccl_ub", "fsdp_double_buffer"}),
    "ddp": frozenset({
        "activation_checkpointing_scope", "broadcast_buffers", "find_unused_parameters", "static_graph",
        "bucket_cap_mb", "gradient_as_bucket_view", "autocast_dtype"}),
}
DEFAULT_STRATEGY = "fsdp2"
PIPELINE_OPTIONS = frozenset({
    "pp_schedule", "pp_schedule_csv", "pp_microbatch_size", "pp_batch_size", "layers_per_stage",
    "round_virtual_stages_to_pp_multiple", "module_fqns_per_model_part", "patch_inner_model",
    "patch_causal_lm_model", "patch_stage_backward_maybe_with_nosync", "dtype", "scale_grads_in_schedule",
    "loss_fn", "pp_seq_len"})
MOE_OPTIONS = frozenset({"ignore_router_for_ac", "reshard_after_forward", "lm_head_precision", "wrap_outer_model",
                         "mp_policy"})
# StepScheduler's keywords a recipe may set (the recipe passes dp_size, the dataloader and the process group).
STEP_SCHEDULER_KEYS = frozenset({
    "global_batch_size", "local_batch_size", "ckpt_every_steps", "save_checkpoint_every_epoch", "val_every_steps",
    "log_remote_every_steps", "loss_average_window_steps", "gc_every_steps", "start_step", "start_epoch",
    "num_epochs", "max_steps", "preemption_signal"})
STEP_SCHEDULER_POSITIVE = ("global_batch_size", "local_batch_size", "ckpt_every_steps", "val_every_steps",
                           "log_remote_every_steps", "loss_average_window_steps", "gc_every_steps", "num_epochs",
                           "max_steps")
DIST_ENV_KEYS = frozenset({"backend", "timeout_minutes"})

# Strict sections: (dotted section, its known keys) for a parsed recipe.
STRICT_SECTIONS = {
    "step_scheduler": STEP_SCHEDULER_KEYS,
    "dist_env": DIST_ENV_KEYS,
    "distributed.pipeline": PIPELINE_OPTIONS,
    "distributed.moe": MOE_OPTIONS,
}

# AutoModel's recipe classes (`recipe:` takes the bare name, a dotted path under nemo_automodel.recipes or a
# `_target_`).
RECIPE_CLASSES = frozenset({
    "TrainFinetuneRecipeForNextTokenPrediction", "TrainFinetuneRecipeForSequenceClassification",
    "KnowledgeDistillationRecipeForNextTokenPrediction", "BenchmarkingRecipeForNextTokenPrediction",
    "FinetuneRecipeForVLM", "KnowledgeDistillationRecipeForVLM", "FinetuneRecipeForMultimodal",
    "PretrainRecipeForMultimodal", "TrainBiEncoderRecipe", "TrainCrossEncoderRecipe", "TrainDiffusionRecipe",
    "DiffusionLMSFTRecipe", "DiffusionGemmaSFTRecipe", "EmbeddingDistillRecipe"})
# The recipe an emitted LLM config names.
LLM_RECIPE = "TrainFinetuneRecipeForNextTokenPrediction"

# Values AutoModel's loader reads as None (its translate_value), so `dp_size: none` means "infer it".
NONE_WORDS = ("none", "None")


def strategy_options(strategy: str) -> frozenset[str]:
    """Every key `distributed:` takes with this strategy."""
    return DISTRIBUTED_COMMON | STRATEGY_OPTIONS.get(strategy, frozenset())
