"""Load balancing of the MoE layers, as each family trains it (trainer/models/moe.py calls in here).

- ``aux_loss``: the Switch Transformer loss (Fedus et al. 2021) as transformers' ``load_balancing_loss_func``
  normalises it, so that a coefficient copied from an upstream config balances as it does upstream:
  ``E * sum_e F_e P_e`` with ``F_e`` the (token, slot) pairs routed to expert e over the tokens (top_k when
  balanced) and ``P_e`` its mean router probability, both pooled over the MoE layers of the forward pass.
  The pooled ``F`` is only known once the last layer has routed, so each layer joins the backward pass
  through `PooledSwitchLoss`, whose backward (which runs after the whole forward) reads the pool: the
  gradient of a layer's summed probabilities is ``E F_e / (L N)`` per token. Counts are summed over the
  data-parallel group first, so loss and gradient equal one process's on the whole batch.
- ``seq_aux_loss``: DeepSeek-V3's sequence-wise balance loss (DeepSeek-V3 report, eqs. 17-20; Megatron's
  ``seq_aux_loss``): per sequence ``sum_e f_e P_e`` with ``f_e = E / (k T) * count_e`` and ``P_e`` the
  sequence's mean of the per-token normalised scores; the mean over the sequences of the global batch,
  one loss per MoE layer, summed over the layers (as Megatron adds each layer's).
- the aux-loss-free bias update (DeepSeek-V3 report, section 2.1.2; Megatron's ``moe_router_enable_expert_bias``
  / ``moe_router_bias_update_rate``; torchtitan's ``load_balance_coeff``): after each optimizer step every
  expert's selection bias moves by ``rate * sign(mean load - its load)``, the load counted over the step's
  whole global batch (all micro-batches, all data-parallel ranks), so every rank applies the same update
  (`trainer.models.moe.update_expert_bias`, which walks the MoE layers).
"""

from __future__ import annotations

from typing import Optional

import torch

from trainer.contract.model_settings import LOAD_BALANCING_TYPES  # noqa: F401  (the names this module runs)


class SwitchPool:
    """The routed counts of the MoE layers in one forward pass (a new pool per forward: a layer that routes
    twice into one pool starts the next, so gradient-accumulation and pipeline micro-batches keep their own)."""

    def __init__(self) -> None:
        self.counts: Optional[torch.Tensor] = None  # (token, slot) pairs per expert, summed over layers and DP
        self.tokens = 0.0  # tokens of one layer over the DP group
        self.layers: set[int] = set()

    def add(self, layer_id: int, counts: torch.Tensor, tokens: float) -> None:
        self.counts = counts.clone() if self.counts is None else self.counts + counts
        self.tokens = tokens
        self.layers.add(layer_id)

    def probability_gradient(self) -> torch.Tensor:
        """d loss / d (one layer's probabilities summed over its tokens) [E]: E F_e / (L N)."""
        layers = len(self.layers)
        return self.counts.shape[0] * self.counts / (layers * self.tokens) ** 2


class SwitchPools:
    """The current pool of one model; layers ask it for the pool of their forward pass."""

    def __init__(self) -> None:
        self.current = SwitchPool()

    def pool_for(self, layer_id: int) -> SwitchPool:
        if layer_id in self.current.layers:
            self.current = SwitchPool()
        return self.current


class PooledSwitchLoss(torch.autograd.Function):
    """Identity on `hidden`; in backward the layer's summed probabilities receive the pooled Switch
    gradient times `scale` (coefficient x the DP / micro-batch scale), and `stats` records the layer's share
    of the pooled loss (without the coefficient)."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, prob_sum: torch.Tensor, pool: SwitchPool, scale: float, stats):
        ctx.pool, ctx.scale, ctx.stats = pool, scale, stats
        ctx.prob_sum = prob_sum.detach()
        return hidden.view_as(hidden)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        per_prob = ctx.pool.probability_gradient().to(ctx.prob_sum)
        if ctx.stats is not None:
            ctx.stats.add_aux((per_prob * ctx.prob_sum).sum())
        return grad, per_prob * ctx.scale, None, None, None


def sequence_aux_share(probs: torch.Tensor, experts: torch.Tensor, batch: int, global_sequences: float,
                       top_k: int) -> torch.Tensor:
    """This rank's share of DeepSeek-V3's sequence-wise loss, the mean over `global_sequences` sequences:
    `probs` [B T, E] the per-token normalised scores, `experts` [B T, k] the chosen experts."""
    num_experts = probs.shape[-1]
    per_sequence = probs.view(batch, -1, num_experts)
    seq_len = per_sequence.shape[1]
    counts = torch.zeros(batch, num_experts, device=probs.device, dtype=probs.dtype)
    counts.scatter_add_(1, experts.reshape(batch, -1), torch.ones_like(experts.reshape(batch, -1), dtype=probs.dtype))
    fraction = counts * (num_experts / (top_k * seq_len))
    return (fraction * per_sequence.mean(dim=1)).sum() / global_sequences


def add_to_parameter(param: torch.Tensor, full_delta: torch.Tensor) -> None:
    """param += full_delta, for a plain parameter or the local shard of a DTensor (FSDP2)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor):
        local = param.to_local()
        delta = distribute_tensor(full_delta.to(device=local.device, dtype=param.dtype), param.device_mesh,
                                  param.placements, src_data_rank=None).to_local()
        local.add_(delta)
    else:
        param.add_(full_delta.to(device=param.device, dtype=param.dtype))


def load_summary(tokens_per_expert: torch.Tensor) -> dict[str, float]:
    """min, max and coefficient of variation (population std / mean) of one layer's expert load."""
    load = tokens_per_expert.double()
    mean = load.mean()
    cv = float(load.std(unbiased=False) / mean) if mean > 0 else 0.0
    return {"min": float(load.min()), "max": float(load.max()), "cv": cv}
