"""What every AutoModel version's LLM recipe shares: the parallel sizes, defaults and recipe class names.

Written from AutoModel's ``parse_distributed_section``, ``initialize_distributed`` and CLI; nothing is imported.
What changes between versions (sections, the strict sections' keys, ``_target_`` names and their keywords) is in
the generated ``recipe_index/data/automodel_schema.json`` (``service.validate.automodel.versions``).
"""

from __future__ import annotations

# The parallel sizes `distributed:` takes next to the strategy (AutoModel's ParallelismSizes).
SIZE_KEYS = ("dp_size", "dp_replicate_size", "tp_size", "pp_size", "cp_size", "ep_size")
# Read by parse_distributed_section itself; Hydra's meta keys (a legacy `_target_: ...FSDP2Manager`) are dropped.
DISTRIBUTED_COMMON = frozenset(SIZE_KEYS) | {"strategy", "pipeline", "moe", "activation_checkpointing",
                                              "_target_", "_recursive_", "_convert_"}
# The strategies parse_distributed_section takes (its strategy map; newer versions add aliases, which
# service.validate.automodel.versions knows). Each one's options are judged by version (schema_rules).
STRATEGIES = frozenset({"fsdp2", "megatron_fsdp", "ddp"})
DEFAULT_STRATEGY = "fsdp2"
STEP_SCHEDULER_POSITIVE = ("global_batch_size", "local_batch_size", "ckpt_every_steps", "val_every_steps",
                           "log_remote_every_steps", "loss_average_window_steps", "gc_every_steps", "num_epochs",
                           "max_steps")
DIST_ENV_KEYS = frozenset({"backend", "timeout_minutes"})

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

