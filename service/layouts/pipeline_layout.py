"""Megatron's explicit pipeline layout (``pipeline_model_parallel_layout``), read as Megatron-Core reads it.

Megatron-Core: megatron/core/transformer/pipeline_parallel_layer_layout.py, ``PipelineParallelLayerLayout``
(``parse_str_to_list`` for the string form, ``__init__`` for the stage count over PP and the implied VP,
``validate_layer_layout`` for what a layout must place) and transformer_config.py ``TransformerConfig.__post_init__``
(a VP that conflicts with the layout's; no first/last-stage sizes or accounting beside it). Pure functions of the
written value: nothing here knows a config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Union

# parse_str_to_list's characters; the list form spells the same LayerType members out.
CHAR_TO_LAYER = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
LAYER_TYPES = ("embedding", "loss", "encoder", "decoder", "mtp")  # megatron/core/transformer/enums.py LayerType
# What the index writes where a recipe sets a layout whose text it does not keep: nothing to parse.
UNREAD_MARKERS = frozenset({"explicit"})
MAX_UNROLLED = 100_000  # a `(t)*99999999` would otherwise build a string of that size


class LayoutSyntaxError(ValueError):
    """A layout Megatron cannot parse (an unknown character or layer type, a stage that is not a list)."""


@dataclass(frozen=True)
class PipelineLayout:
    stages: tuple[tuple[str, ...], ...]  # layer types per PP x VP stage, in the written (schedule) order

    def count(self, layer: str) -> int:
        return sum(stage.count(layer) for stage in self.stages)


def _unroll(text: str) -> str:
    """parse_str_to_list's two substitutions: ``(...)*n`` then ``x*n``, with commas dropped first."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        total = len(text)

        def repeat(match: re.Match) -> str:
            nonlocal total
            total += len(match.group(1)) * int(match.group(2))
            if total > MAX_UNROLLED:
                raise LayoutSyntaxError(f"the layout unrolls to more than {MAX_UNROLLED:,} layers")
            return match.group(1) * int(match.group(2))

        text = re.sub(pattern, repeat, text)
    return text


def parse_layout(value: Union[str, list]) -> Optional[PipelineLayout]:
    """The layout's stages, or None for a marker that carries no layout (``explicit``). Raises
    LayoutSyntaxError where Megatron's parser asserts."""
    if isinstance(value, str):
        if value.strip() in UNREAD_MARKERS:
            return None
        stages = []
        for stage in _unroll(value).split("|"):
            unknown = sorted(set(stage) - set(CHAR_TO_LAYER))
            if unknown:
                raise LayoutSyntaxError(f"unknown layer character(s) {', '.join(map(repr, unknown))} in the layout "
                                        f"string; Megatron knows {', '.join(CHAR_TO_LAYER)} (E embedding, t decoder, "
                                        "m mtp, L loss, | between stages, (..)*n and x*n to repeat)")
            stages.append(tuple(CHAR_TO_LAYER[c] for c in stage))
        return PipelineLayout(tuple(stages))
    if isinstance(value, list):
        stages = []
        for row in value:
            if not isinstance(row, list):
                raise LayoutSyntaxError(f"the list form is a list of stages, each a list of layer names; got a "
                                        f"{type(row).__name__} ({row!r:.40})")
            names = [str(x).strip().lower() for x in row]
            unknown = sorted({n for n in names if n not in LAYER_TYPES})
            if unknown:
                raise LayoutSyntaxError(f"unknown layer type(s) {unknown} in the layout list; Megatron's LayerType "
                                        f"has {', '.join(LAYER_TYPES)}")
            stages.append(tuple(names))
        return PipelineLayout(tuple(stages))
    raise LayoutSyntaxError(f"a layout is a string or a list of stages, not a {type(value).__name__}")


def layout_problems(layout: PipelineLayout, layers: Optional[int], pp: int, vp: Optional[int],
                    mtp_layers: Optional[int]) -> list[str]:
    """What Megatron-Core refuses in this layout for a model of ``layers`` decoder layers (None: unknown) on
    PP ranks with ``vp`` virtual stages (None: unset, then the layout's own), in its order of checks."""
    stages = len(layout.stages)
    if stages % pp:
        return [f"it has {stages} stages, which do not divide over pp_size {pp} (Megatron needs PP x VP stages)"]
    implied = stages // pp
    if vp is not None and vp != implied:
        return [f"it has {stages} stages = PP {pp} x VP {implied}, but vp_size is {vp} (Megatron asserts they agree)"]
    flat = [layer for chunk in range(implied) for rank in range(pp) for layer in layout.stages[chunk * pp + rank]]
    problems = []
    if not flat or flat[0] != "embedding":
        problems.append("its first layer is not the embedding (E): Megatron needs the embedding first")
    if not flat or flat[-1] != "loss":
        problems.append("its last layer is not the loss (L): Megatron needs the loss last")
    for layer, letter in (("embedding", "E"), ("loss", "L")):
        if flat.count(layer) > 1:
            problems.append(f"it places the {layer} ({letter}) {flat.count(layer)} times; Megatron needs it once")
    decoders = flat.count("decoder")
    if layers is not None and decoders != layers:
        problems.append(f"it places {decoders} decoder layers (t), the model has {layers}")
    mtp = flat.count("mtp")
    if mtp_layers is not None and mtp != mtp_layers:
        problems.append(f"it places {mtp} mtp layers (m), the model config has mtp_num_layers {mtp_layers}")
    if mtp and "decoder" in flat[flat.index("mtp"):]:
        problems.append("it places decoder layers after an mtp layer; Megatron needs the mtp layers after them all")
    if "encoder" in flat:
        problems.append("it places an encoder layer, which Megatron's flexible layout does not support")
    return problems


def empty_stages(layout: PipelineLayout) -> list[int]:
    """The stages (0-based, in the written order) that hold no layer at all."""
    return [i for i, stage in enumerate(layout.stages) if not stage]


def even_layout(layers: int, pp: int, vp: int, mtp_layers: int = 0) -> Optional[str]:
    """A layout string that places ``layers`` over PP x VP stages as evenly as whole layers allow, the
    embedding on the first stage and the loss (after any mtp layers) on the last, the extra layers on the
    middle stages; None when a stage would be left without a decoder layer."""
    stages = pp * vp
    if layers < stages:
        return None
    base, extra = divmod(layers, stages)
    counts = [base] * stages
    # the extra layers go to the middle stages first: the edge stages carry the embedding and the loss
    for i in (list(range(1, stages - 1)) + [stages - 1, 0])[:extra]:
        counts[i] += 1
    parts = [f"t*{n}" if n > 1 else "t" for n in counts]
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + ("m" * mtp_layers) + "L"
    return "|".join(parts)
