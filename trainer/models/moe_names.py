"""Expert weights between the trainer's stacked layout and the Hub's per-expert one.

The trainer holds ``model.layers.L.mlp.experts.gate_proj`` [E, I, H] (and up_proj, down_proj); the Hub
checkpoints of each family hold ``model.layers.L.{block}.experts.{i}.{gate}.weight`` [I, H] per expert
and ``model.layers.L.{block}.gate.weight`` for the router (`HUB_LAYOUTS`: ``mlp`` with
gate/up/down_proj for Qwen3-MoE and Qwen2-MoE, ``block_sparse_moe`` with w1/w3/w2 for Mixtral). Loading
stacks, saving unbinds, so transformers loads what the trainer writes and the trainer loads the Hub's files.
Qwen2-MoE's ``mlp.shared_expert.*`` and ``mlp.shared_expert_gate.weight`` have the same names on both sides.
"""

from __future__ import annotations

import re
from typing import Mapping

import torch

from trainer.models.moe_config import HUB_LAYOUTS, HubLayout

_EXPERTS = re.compile(r"^(?P<layer>(?:.*\.)?layers\.\d+)\.mlp\.experts\.(?P<proj>gate_proj|up_proj|down_proj)$")
_ROUTER = re.compile(r"^(?P<layer>(?:.*\.)?layers\.\d+)\.mlp\.gate\.weight$")


def _hub_proj(layout: HubLayout, proj: str) -> str:
    return {"gate_proj": layout.gate, "up_proj": layout.up, "down_proj": layout.down}[proj]


def hub_expert_names(name: str, num_experts: int, model_type: str) -> list[str]:
    """The Hub names whose stack is the trainer's parameter `name` ([] for a non-expert name)."""
    match = _EXPERTS.match(name)
    if not match:
        return []
    layout = HUB_LAYOUTS[model_type]
    proj = _hub_proj(layout, match["proj"])
    return [f"{match['layer']}.{layout.block}.experts.{i}.{proj}.weight" for i in range(num_experts)]


def hub_name(name: str, model_type: str) -> str:
    """The Hub name of a non-expert parameter (the router moves to `block_sparse_moe` for Mixtral)."""
    match = _ROUTER.match(name)
    if match and model_type in HUB_LAYOUTS:
        return f"{match['layer']}.{HUB_LAYOUTS[model_type].block}.gate.weight"
    return name


class HubLayoutReader:
    """A safetensors reader seen through the trainer's names: experts come stacked."""

    def __init__(self, reader, config):
        self.reader = reader
        self.model_type = config.model_type
        self.num_experts = config.moe.num_experts

    def _sources(self, name: str) -> list[str]:
        return hub_expert_names(name, self.num_experts, self.model_type) or [hub_name(name, self.model_type)]

    def __contains__(self, name: str) -> bool:
        return all(source in self.reader for source in self._sources(name))

    def get(self, name: str) -> torch.Tensor:
        sources = self._sources(name)
        if len(sources) == 1 and not _EXPERTS.match(name):
            return self.reader.get(sources[0])
        return torch.stack([self.reader.get(source) for source in sources])


def to_hub_layout(state: Mapping[str, torch.Tensor], config) -> dict[str, torch.Tensor]:
    """A full state dict in the trainer's names -> the Hub's per-expert names (other tensors as they are)."""
    if getattr(config, "moe", None) is None:
        return dict(state)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        names = hub_expert_names(name, tensor.shape[0], config.model_type)
        if names:
            out.update(zip(names, (t.clone() for t in tensor.unbind(0))))  # own storage each
        else:
            out[hub_name(name, config.model_type)] = tensor
    return out


def is_expert_param(name: str) -> bool:
    return bool(_EXPERTS.match(name))
