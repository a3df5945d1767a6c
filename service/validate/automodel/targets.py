"""The ``_target_`` names AutoModel's LLM recipes build from, with the keywords each takes.

Read from AutoModel's published source (never imported): ``None`` where the callable takes ``**kwargs`` or
forwards them (model and tokenizer factories), so only the name is known. ``torch.*`` targets are checked
against torch's own source when torch is installed (``service.validate.rules.targets``).
"""

from __future__ import annotations

from typing import Iterator, Optional

# AutoModel's loader imports these top-level packages without further opt-in (its ALLOWED_IMPORT_PREFIXES);
# any other must be installed where the recipe runs.
IMPORT_PREFIXES = ("nemo_automodel", "torch", "transformers", "torchdata", "torchao", "liger_kernel")

_DATALOADER = frozenset({
    "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn", "pin_memory",
    "drop_last", "timeout", "worker_init_fn", "multiprocessing_context", "generator", "prefetch_factor",
    "persistent_workers", "pin_memory_device", "in_order", "snapshot_every_n_steps",
    "dataloader_type"})  # the recipe takes this one itself, for a Megatron dataset's sampler
_LLM = "nemo_automodel.components.datasets.llm."
_SFT_DATASET = frozenset({"tokenizer", "seq_length", "limit_dataset_samples", "fp8", "split", "dataset_name",
                          "padding", "truncation"})

KNOWN_TARGETS: dict[str, Optional[frozenset[str]]] = {
    "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained": None,
    "nemo_automodel.NeMoAutoModelForCausalLM.from_config": None,
    "nemo_automodel.NeMoAutoModelForSeq2SeqLM.from_pretrained": None,
    "nemo_automodel.NeMoAutoTokenizer.from_pretrained": None,
    "nemo_automodel._transformers.auto_tokenizer.NeMoAutoTokenizer.from_pretrained": None,
    "nemo_automodel.components._peft.lora.PeftConfig": frozenset({
        "target_modules", "exclude_modules", "match_all_linear", "dim", "alpha", "use_dora", "dropout",
        "dropout_position", "lora_A_init", "lora_dtype", "use_memory_efficient_lora", "use_triton",
        "moe_rank_scaling"}),
    "nemo_automodel.components.training.rng.StatefulRNG": frozenset({"seed", "ranked"}),
    "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy": frozenset({"fp32_upcast", "ignore_index",
                                                                              "reduction"}),
    "nemo_automodel.components.loss.linear_ce.FusedLinearCrossEntropy": frozenset({"ignore_index",
                                                                                   "logit_softcapping", "reduction"}),
    "nemo_automodel.components.loss.chunked_ce.ChunkedCrossEntropy": frozenset({"chunk_len", "compile",
                                                                                "ignore_index", "reduction"}),
    "nemo_automodel.components.loss.te_parallel_ce.TEParallelCrossEntropy": frozenset({"ignore_index", "reduction",
                                                                                       "tp_group"}),
    _LLM + "squad.make_squad_dataset": _SFT_DATASET | {"chat_template"},
    _LLM + "xlam.make_xlam_dataset": _SFT_DATASET,
    _LLM + "seq2seq.make_seq2seq_dataset": frozenset({
        "tokenizer", "seq_length", "limit_dataset_samples", "split", "dataset_name", "source_template",
        "source_key", "target_key", "decoder_start_token_id", "truncation"}),
    _LLM + "hellaswag.HellaSwag": frozenset({"path_or_dataset", "tokenizer", "split", "num_samples_limit",
                                             "pad_to_max_length"}),
    _LLM + "chat_dataset.ChatDataset": frozenset({
        "path_or_dataset_id", "tokenizer", "split", "name", "seq_length", "padding", "truncation",
        "start_of_turn_token", "chat_template", "shuffle_seed", "mask_reasoning_content", "mask_history",
        "unshifted", "skip_invalid_samples"}),
    _LLM + "column_mapped_text_instruction_dataset.ColumnMappedTextInstructionDataset": frozenset({
        "path_or_dataset_id", "column_mapping", "tokenizer", "split", "name", "answer_only_loss_mask",
        "seq_length", "padding", "truncation", "limit_dataset_samples", "use_hf_chat_template"}),
    _LLM + "megatron_dataset.MegatronPretraining": frozenset({
        "paths", "seq_length", "tokenizer", "micro_batch_size", "global_batch_size", "create_attention_mask", "seed",
        "split", "index_mapping_dir", "num_dataset_builder_threads", "num_train_samples", "num_val_samples",
        "num_test_samples", "trainer_max_steps", "trainer_val_check_interval", "trainer_limit_val_batches",
        "trainer_limit_test_batches", "mmap_bin_files", "splits_to_build", "object_storage_config"}),
    _LLM + "mock_iterable_dataset.MockIterableDataset": frozenset({"vocab_size", "seq_len", "num_samples",
                                                                   "batch_size"}),
    _LLM + "agent_chat.make_agent_chat_dataset": None,
    _LLM + "mock.build_unpacked_dataset": None,
    _LLM + "mock_prefix_tree.build_mock_rollout_dataset": None,
    _LLM + "nanogpt_dataset.NanogptDataset": None,
    "nemo_automodel.components.datasets.utils.default_collater": frozenset({"pad_seq_len_divisible"}),
    "nemo_automodel.components.distributed.fsdp2.FSDP2Manager": None,  # legacy: `distributed:` drops it
    "nemo_automodel.components.distributed.config.FSDP2Config": None,
    "nemo_automodel.components.distributed.pipelining.config.PipelineConfig": None,
    "nemo_automodel.components.models.common.BackendConfig": None,
    "nemo_automodel.components.models.common.utils.BackendConfig": None,
    "nemo_automodel.components.models.gpt2.build_gpt2_model": None,
    "nemo_automodel.components.moe.parallelizer.parallelize_model": None,
    "nemo_automodel.components.quantization.qat.QATConfig": None,
    "nemo_automodel.components.eval.tool_call_evaluator.ToolCallAccuracyEvaluator": None,
    "nemo_automodel.recipes.llm.train_ft.TrainFinetuneRecipeForNextTokenPrediction": None,
    "torchdata.stateful_dataloader.StatefulDataLoader": _DATALOADER,
    "torch.utils.data.DataLoader": _DATALOADER - {"snapshot_every_n_steps"},
}


def walk_targets(node, key: str = "") -> Iterator[tuple[str, str, dict]]:
    """(dotted key of the mapping, its target, the mapping) for every `_target_` in the recipe."""
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and key:
            yield key, target, node
        for name, value in node.items():
            if isinstance(name, str):
                yield from walk_targets(value, f"{key}.{name}" if key else name)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk_targets(value, f"{key}[{index}]")


def importable_by_default(target: str) -> bool:
    top = target.split(".", 1)[0]
    return top in IMPORT_PREFIXES


def keywords(node: dict) -> list[str]:
    """The keywords a target is called with (AutoModel passes every other key of the mapping)."""
    return [k for k in node if isinstance(k, str) and k not in ("_target_", "_recursive_", "_convert_")]
