"""An AutoModel recipe read into the facts the shared rules judge (layout, batch, model, hardware, world)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from service.facts import Facts, Layout
from service.validate.automodel.schema import DEFAULT_STRATEGY, NONE_WORDS, SIZE_KEYS

# AutoModel's strategies, as the memory model shards training state: FSDP2 and Megatron-FSDP shard all of it.
STRATEGY_SHARDING = {"fsdp2": "fsdp2", "megatron_fsdp": "fsdp2", "ddp": "ddp"}


def section(data: dict, name: str) -> dict:
    value = data.get(name)
    return value if isinstance(value, dict) else {}


def whole(value: Any) -> Optional[int]:
    """A positive whole number, else None (absent, null, `none`, or a wrong type RA-A003 reports)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


@dataclass(frozen=True)
class Sizes:
    """`distributed:`'s parallel sizes with AutoModel's defaults (1; dp inferred when unset)."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: Optional[int] = None  # as given; None: world / (tp·cp·pp)
    dp_replicate: Optional[int] = None
    strategy: str = DEFAULT_STRATEGY

    def dp_at(self, world: int) -> Optional[int]:
        """The data-parallel size at this world, None when the world does not hold the layout."""
        if self.dp is not None:
            return self.dp if self.dp * self.non_dp == world else None
        return world // self.non_dp if world % self.non_dp == 0 else None

    @property
    def non_dp(self) -> int:
        return self.tp * self.cp * self.pp


def sizes_of(data: dict) -> Sizes:
    dist = section(data, "distributed")
    values = {key: whole(dist.get(key)) for key in SIZE_KEYS}
    strategy = dist.get("strategy", DEFAULT_STRATEGY)
    strategy = strategy.lower() if isinstance(strategy, str) else DEFAULT_STRATEGY
    return Sizes(tp=values["tp_size"] or 1, pp=values["pp_size"] or 1, cp=values["cp_size"] or 1,
                 ep=values["ep_size"] or 1, dp=values["dp_size"], dp_replicate=values["dp_replicate_size"],
                 strategy=strategy)


def model_name(data: dict) -> Optional[str]:
    """The Hub id or path the model is built from (`from_pretrained`'s, or its `config:`'s for `from_config`)."""
    model = section(data, "model")
    for node in (model, section(model, "config")):
        name = node.get("pretrained_model_name_or_path")
        if isinstance(name, str) and name.strip():
            return name.strip()
    return None


def seq_length(data: dict) -> Optional[int]:
    """Tokens per sample: the packed length when packing is on, else the dataset's sequence length."""
    packed = whole(section(data, "packed_sequence").get("packed_sequence_size"))
    if packed:
        return packed
    dataset = section(data, "dataset")
    for key in ("seq_length", "seq_len", "max_length"):
        if whole(dataset.get(key)):
            return dataset[key]
    return None


def mode(data: dict) -> str:
    if section(data, "peft"):
        return "peft"
    target = str(section(data, "model").get("_target_", ""))
    return "pretrain" if target.endswith(".from_config") else "sft"


def recompute(data: dict) -> str:
    value = section(data, "distributed").get("activation_checkpointing", False)
    if isinstance(value, str) and value.lower() not in NONE_WORDS + ("false", "off", "no", "disabled"):
        return "selective" if value.lower() == "selective" else "full"
    return "full" if value is True else "none"


def facts_of(data: dict, world: int, gpus_per_node: int, model, hardware) -> Facts:
    sizes = sizes_of(data)
    scheduler = section(data, "step_scheduler")
    dist = section(data, "distributed")
    layout = Layout(tp=sizes.tp, pp=sizes.pp, cp=sizes.cp, ep=sizes.ep,
                    sp=dist.get("sequence_parallel") is True,
                    micro_batch_size=whole(scheduler.get("local_batch_size")) or 1, recompute=recompute(data))
    strategy = STRATEGY_SHARDING.get(sizes.strategy, "fsdp2")
    return Facts(layout=layout, world_size=world, model=model, hardware=hardware, gpus_per_node=gpus_per_node,
                 global_batch_size=whole(scheduler.get("global_batch_size")), seq_length=seq_length(data),
                 precision="bf16", mode=mode(data), strategy=strategy, peft=mode(data) == "peft",
                 extra={"fused_loss": _fused_loss(data), "peft_base_bytes": _base_bytes(data)})


def _base_bytes(data: dict) -> int:
    """Bytes per frozen base weight under LoRA: AutoModel loads the base in ``model.torch_dtype`` (the
    checkpoint's own 16-bit dtype for ``auto`` or unset), and only the adapters train."""
    dtype = str(section(data, "model").get("torch_dtype", "auto")).lower().replace("torch.", "")
    return 4 if dtype in ("float32", "fp32") else 2


def _fused_loss(data: dict) -> bool:
    """AutoModel's fused linear cross-entropy never holds the full logits."""
    return str(section(data, "loss_fn").get("_target_", "")).endswith((".FusedLinearCrossEntropy",
                                                                       ".ChunkedCrossEntropy"))
