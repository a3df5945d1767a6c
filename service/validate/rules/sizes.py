"""The sizes a layout can grow to on its world, for the fixes the rules suggest.

A fix that names a size the world cannot hold (EP already spanning every GPU) or the engine cannot
run (pipeline or context parallel in the bundled trainer) only trades one finding for another, so
every size a fix suggests comes from here: the next TP, PP, EP or CP that the world divides (the
same divisibility RA-L006/RA-L007 check), the model allows (heads, layers, experts) and the engine
runs (``trainer/contract/capabilities.py`` for the bundled strategies; Megatron runs them all).
"""

from __future__ import annotations

from typing import Optional

from service.facts import Facts
from service.layouts.arithmetic import divisors, megatron_split
from trainer.contract.capabilities import CAPABILITIES, supports_precision

BUNDLED = ("fsdp2", "ddp")
CP_SIZES = (2, 4, 8)  # long context -> CP 2, 4 or 8


def bundled(f: Facts) -> bool:
    """The config runs on the bundled trainer (not Megatron Bridge)."""
    return f.strategy in BUNDLED


def engine_runs(f: Facts, capability: str) -> bool:
    """Whether the config's engine has a parallel dimension (a ``CAPABILITIES`` key)."""
    return not bundled(f) or bool(CAPABILITIES.get(capability))


def tp_domain(f: Facts) -> Optional[int]:
    """The most GPUs one TP group may span without leaving NVLink (None without hardware)."""
    hw = f.hardware
    if hw is None:
        return None
    node = f.gpus_per_node or hw.gpus_per_node
    return hw.nvlink_domain if hw.nvlink_domain > hw.gpus_per_node else min(hw.nvlink_domain, node)


def _world_holds(f: Facts, tp: int, pp: int, cp: int, ep: int, etp: int) -> bool:
    if f.world_size % (tp * pp * cp):
        return False
    return (ep == 1 and etp == tp) or f.world_size % (pp * ep * etp) == 0


def grown(layout, name: str, size: int) -> dict[str, int]:
    """The layout sizes that change when ``name`` (tp, pp, cp, ep) is raised to ``size``: without experts
    (EP 1 and ETP = TP) the expert mesh follows TP, so raising TP raises ETP with it."""
    if name == "tp" and layout.ep == 1 and layout.etp == layout.tp:
        return {"tp": size, "etp": size}
    return {name: size}


def _holds(f: Facts, name: str, size: int) -> bool:
    """Whether the world holds the layout with ``name`` raised to ``size``."""
    lay = f.layout
    current = dict(tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, etp=lay.etp)
    return _world_holds(f, **(current | grown(lay, name, size)))


def _tp_runs(f: Facts) -> bool:
    if not bundled(f):
        return True
    arch = f.hardware.arch if f.hardware is not None else None
    return (bool(CAPABILITIES.get("tensor_parallel"))
            and (f.strategy != "ddp" or bool(CAPABILITIES.get("tp_with_ddp")))
            and (not f.peft or bool(CAPABILITIES.get("tp_with_lora")))
            and supports_precision(f.precision, arch, tp_size=2))


def larger_tp(f: Facts) -> Optional[int]:
    """The smallest TP above the current one that divides the query and KV heads and that the NVLink
    domain and the world hold."""
    if not _tp_runs(f):
        return None
    limit = tp_domain(f) or f.gpus_per_node or f.world_size
    for tp in range(f.layout.tp + 1, min(limit, f.world_size) + 1):
        if f.model is not None:
            heads, kv = f.model.num_attention_heads, f.model.num_key_value_heads
            if heads % tp or kv % tp:  # TP beyond the KV heads replicates them (RA-L003): no fix
                continue
        if _holds(f, "tp", tp):
            return tp
    return None


def larger_pp(f: Facts) -> Optional[int]:
    """The smallest PP above the current one that the world holds and that splits the layers evenly,
    else the smallest Megatron can split unevenly."""
    if not engine_runs(f, "pipeline_parallel") or (not bundled(f) and f.extra.get("sharding") == "full"):
        return None  # Megatron-FSDP does not compose with PP (RA-L017)
    vp = f.layout.vp_or_1
    layers = f.model.num_hidden_layers if f.model is not None else None
    fitting = [pp for pp in range(f.layout.pp + 1, min(layers or 64, f.world_size) + 1) if _holds(f, "pp", pp)]
    if layers is None:
        return fitting[0] if fitting else None
    even = [pp for pp in fitting if layers % (pp * vp) == 0]  # an even split needs no settings (RA-L011)
    uneven = [pp for pp in fitting if megatron_split(layers, pp, vp) is not None]
    return (even or uneven or [None])[0]


def larger_ep(f: Facts) -> Optional[int]:
    """The smallest EP above the current one that divides the experts and fits the expert mesh
    (PP*EP*ETP divides the world); None when EP already spans every GPU it can."""
    if f.model is None or not f.model.is_moe or not engine_runs(f, "expert_parallel"):
        return None
    for ep in divisors(f.model.num_experts):
        if ep > f.layout.ep and _holds(f, "ep", ep):
            return ep
    return None


def cp_sizes(f: Facts) -> list[int]:
    """The CP sizes (2, 4, 8) the engine runs, the world holds and the sequence divides by 2*CP."""
    if not engine_runs(f, "context_parallel"):
        return []
    seq = f.seq_length
    return [cp for cp in CP_SIZES if (seq is None or seq % (2 * cp) == 0) and _holds(f, "cp", cp)]
