"""The mixture-of-experts MLP: a top-k router, grouped SwiGLU experts, and the token permutation
between them (Shazeer et al. 2017; Fedus et al. 2021 for the load-balancing loss).

Parameter names: ``mlp.gate.weight`` [E, H] (the router) and the experts as three stacked tensors,
``mlp.experts.gate_proj`` / ``up_proj`` [E, I, H] and ``down_proj`` [E, H, I], each expert's slice
in nn.Linear's [out, in] layout, so the Hub's per-expert ``mlp.experts.{i}.gate_proj.weight`` is one
index away (trainer/models/moe_names.py converts on load and save).

Routing is dropless: every token reaches its k experts. Tokens are sorted by expert (one argsort,
no Python loop over experts), the experts run as one grouped GEMM (`torch._grouped_mm`: bf16 on CUDA
GPUs of compute capability 8.0+, fp32/bf16 on CPU; a loop of plain matmuls over the per-expert groups
where it does not run), and
the outputs are weighted and summed back per token with `scatter_add`. Qwen2-MoE adds a shared expert,
a dense SwiGLU every token passes through (``mlp.shared_expert.{gate,up,down}_proj``), scaled by
sigmoid(``mlp.shared_expert_gate``(x)): a non-expert parameter, sharded over data parallel as attention
is, and local to each rank under expert parallel. Expert parallel
(trainer/distributed/expert_parallel.py) replaces the `dispatcher`, which moves the sorted tokens
to the ranks holding their experts and back; this module stays free of communication.

Load balancing (the Switch loss with transformers' normalisation, DeepSeek-V3's sequence-wise loss, its
aux-loss-free bias update) is trainer/models/moe_balance.py's: the counts are summed over the data-parallel
group first, so loss and gradient equal one process's on the whole batch, and the loss joins the backward pass
through an identity autograd function (as Megatron-LM's MoEAuxLossAutoScaler), so the loss function and the
loop need not know about it.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainer.fused.ops import silu_mul
from trainer.models.moe_balance import (
    PooledSwitchLoss,
    SwitchPools,
    add_to_parameter,
    load_summary,
    sequence_aux_share,
)
from trainer.models.moe_config import MoEConfig


def local_tensor(param: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor parameter (expert parallel), the tensor itself otherwise."""
    return param.to_local() if hasattr(param, "to_local") else param


class RouterLinear(torch.autograd.Function):
    """fp32 router logits ``x @ weight.T`` that keep ``x`` and ``weight`` for backward in their own dtype (as
    Megatron's RouterGatingLinearFunction): ``F.linear(x.float(), ...)`` would keep an fp32 copy of every
    token's hidden state per MoE layer, twice the bf16 input it was cast from."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return F.linear(x.float(), weight.float())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad = grad.float()
        with torch.autocast(device_type=grad.device.type, enabled=False):
            grad_x = (grad @ weight.float()).to(x.dtype) if ctx.needs_input_grad[0] else None
            grad_weight = (grad.t() @ x.float()).to(weight.dtype) if ctx.needs_input_grad[1] else None
        return grad_x, grad_weight


class Router(nn.Module):
    """softmax(x W^T) in fp32, then top-k; the top-k weights renormalised when `norm_topk_prob`.

    DeepSeek-V3 (`scoring_func` sigmoid, as transformers' DeepseekV3TopkRouter): sigmoid scores; the
    experts are chosen on score + `e_score_correction_bias` within the `topk_group` best of `n_group`
    groups (a group ranks by the sum of its top-2), the weights are the chosen experts' plain scores
    (renormalised when `norm_topk_prob`) times `routed_scaling_factor`. The bias takes no gradient: it
    only picks experts (aux-loss-free balancing), and is a frozen parameter so that it loads, saves,
    shards and checkpoints by name as the weights do."""

    def __init__(self, hidden_size: int, moe: MoEConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(moe.num_experts, hidden_size))
        self.top_k = moe.top_k
        self.norm_topk_prob = moe.norm_topk_prob
        self.sigmoid = moe.scoring_func == "sigmoid"
        self.n_group, self.topk_group = moe.n_group, moe.topk_group
        self.routed_scaling_factor = moe.routed_scaling_factor
        if moe.score_correction_bias:
            self.e_score_correction_bias = nn.Parameter(torch.empty(moe.num_experts), requires_grad=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(top-k weights [N, k] fp32, expert ids [N, k], all probabilities [N, E] fp32)."""
        # fp32 scores whatever the model dtype or autocast (Megatron's moe_router_dtype fp32; transformers'
        # DeepSeek-V3 router): the top-k choice and the balancing statistics see no bf16 rounding.
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = RouterLinear.apply(x, self.weight)
        if self.sigmoid:
            return self._sigmoid_route(logits)
        probs = F.softmax(logits, dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, experts, probs

    def _sigmoid_route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores = logits.sigmoid()
        choice = scores.detach()
        if hasattr(self, "e_score_correction_bias"):
            choice = choice + self.e_score_correction_bias.float()
        if self.n_group > 1:
            choice = self._mask_groups(choice)
        experts = torch.topk(choice, self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, experts)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        # The probabilities of the aux loss (when a config asks for one): the scores normalised per token.
        return weights * self.routed_scaling_factor, experts, scores / scores.sum(dim=-1, keepdim=True)

    def _mask_groups(self, choice: torch.Tensor) -> torch.Tensor:
        """`choice` with -inf outside each token's `topk_group` best groups."""
        grouped = choice.view(choice.shape[0], self.n_group, -1)
        group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)
        best = torch.topk(group_scores, self.topk_group, dim=-1, sorted=False)[1]
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
        return grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view_as(choice)


def grouped_mm_supported(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether torch._grouped_mm runs this product, forward and backward: bf16 on CUDA GPUs of compute
    capability 8.0+ (torch 2.9+), fp32 or bf16 on CPU (a kernel since torch 2.9), with rows whose byte
    strides are multiples of 16 and 16-byte aligned data."""
    if not hasattr(torch, "_grouped_mm") or x.shape[0] == 0:
        return False
    if x.is_cuda:
        if x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
            return False
        if torch.cuda.get_device_capability(x.device) < (8, 0):
            return False
    elif x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16) or weight.dtype != x.dtype:
        return False
    aligned = all(t.data_ptr() % 16 == 0 for t in (x, weight))
    return aligned and all(n * x.element_size() % 16 == 0 for n in (x.shape[-1], weight.shape[-1], weight.shape[-2]))


def grouped_matmul(x: torch.Tensor, weight: torch.Tensor, counts: torch.Tensor, counts_list: list[int]) -> torch.Tensor:
    """Rows of `x` grouped by expert (`counts` rows each) times each expert's weight^T: [M, in] -> [M, out].
    `weight` is [E, out, in] (nn.Linear's layout per expert)."""
    if grouped_mm_supported(x, weight):
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        return torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
    # Fallback: one matmul per expert group; the grouping itself is the argsort of the caller.
    outputs = [chunk @ weight[e].t() for e, chunk in enumerate(torch.split(x, counts_list)) if counts_list[e]]
    if not outputs:
        return x.new_zeros(0, weight.shape[1])
    return torch.cat(outputs)


class ScaleGrad(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by `scale`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


class GroupedExperts(nn.Module):
    """E SwiGLU experts stored as stacked weights; under expert parallel each rank holds a slice.
    `grad_scale` multiplies the weights' gradients (expert parallel: see expert_parallel.shard_experts)."""

    def __init__(self, hidden_size: int, moe: MoEConfig, kernels: str = "torch"):
        super().__init__()
        e, i = moe.num_experts, moe.expert_intermediate_size
        self.gate_proj = nn.Parameter(torch.empty(e, i, hidden_size))
        self.up_proj = nn.Parameter(torch.empty(e, i, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(e, hidden_size, i))
        self.kernels = kernels
        self.grad_scale = 1.0

    def _weight(self, param: torch.Tensor) -> torch.Tensor:
        weight = local_tensor(param)
        return weight if self.grad_scale == 1.0 else ScaleGrad.apply(weight, self.grad_scale)

    @property
    def num_local_experts(self) -> int:
        return local_tensor(self.gate_proj).shape[0]

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """`x` [M, H] sorted by local expert, `counts` [local experts] rows each -> [M, H]."""
        counts_list = counts.tolist()
        gate = grouped_matmul(x, self._weight(self.gate_proj), counts, counts_list)
        up = grouped_matmul(x, self._weight(self.up_proj), counts, counts_list)
        return grouped_matmul(silu_mul(gate, up, self.kernels), self._weight(self.down_proj), counts, counts_list)


class LocalDispatcher:
    """No expert parallel: the sorted tokens go straight to the local experts."""

    def __call__(self, experts: GroupedExperts, x_sorted: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return experts(x_sorted, counts)


class AttachAuxLoss(torch.autograd.Function):
    """Identity on `hidden`; in backward, `aux_loss` receives gradient 1, so it joins the loss's backward."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, aux_loss: torch.Tensor) -> torch.Tensor:
        ctx.aux_shape, ctx.aux_dtype = aux_loss.shape, aux_loss.dtype
        return hidden.view_as(hidden)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, torch.ones(ctx.aux_shape, dtype=ctx.aux_dtype, device=grad.device)


class MoEStats:
    """What one MoE layer routed since the last `reset`: tokens per expert (over the DP group) per micro-batch,
    and its share of the load-balancing loss (without the coefficient)."""

    def __init__(self) -> None:
        self.tokens_per_expert: Optional[torch.Tensor] = None
        self.aux_loss = 0.0
        self.micro_batches = 0

    def add(self, tokens_per_expert: torch.Tensor) -> None:
        counts = tokens_per_expert.detach()
        self.tokens_per_expert = counts if self.tokens_per_expert is None else self.tokens_per_expert + counts
        self.micro_batches += 1

    def add_aux(self, share: torch.Tensor) -> None:
        self.aux_loss = self.aux_loss + share.detach()

    def reset(self) -> None:
        self.__init__()


class MoE(nn.Module):
    """Router + experts, and when given: Qwen2-MoE's `shared_expert` (a dense MLP every token passes
    through, scaled by a sigmoid gate) or DeepSeek-V3's `shared_experts` (the same, ungated). `aux_group`
    (the data-parallel group) and `aux_grad_scale` are set by the recipe: the DP size over the number of
    gradient-accumulation micro-batches (see the module doc). The balancing (`load_balancing`, `aux_loss_coef`,
    `bias_update_rate`) is trainer/models/moe_balance.py's; `switch_pools` is shared by the model's MoE layers
    (CausalLM sets it) so that the Switch loss pools them."""

    def __init__(self, hidden_size: int, moe: MoEConfig, kernels: str = "torch",
                 shared_expert: Optional[nn.Module] = None, shared_experts: Optional[nn.Module] = None):
        super().__init__()
        self.gate = Router(hidden_size, moe)
        self.experts = GroupedExperts(hidden_size, moe, kernels)
        if shared_expert is not None:
            self.shared_expert = shared_expert
            self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False)
        if shared_experts is not None:
            self.shared_experts = shared_experts
        self.num_experts = moe.num_experts
        self.top_k = moe.top_k
        self.load_balancing = moe.load_balancing_type
        self.aux_loss_coef = moe.router_aux_loss_coef
        self.bias_update_rate = moe.bias_update_rate if moe.score_correction_bias else 0.0
        self.switch_pools = SwitchPools()
        self.dispatcher = LocalDispatcher()
        self.aux_group = None
        self.aux_grad_scale = 1.0
        self.stats = MoEStats()
        self.step_counts: Optional[torch.Tensor] = None  # routed since the last bias update, over the DP group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, experts, probs = self.gate(flat)
        flat_experts = experts.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)
        counts = torch.bincount(flat_experts, minlength=self.num_experts)
        token_of = order // self.top_k
        out_sorted = self.dispatcher(self.experts, flat[token_of], counts)
        out_sorted = out_sorted * weights.reshape(-1)[order].unsqueeze(-1).to(out_sorted.dtype)
        # scatter_add_ keeps only the index for backward; index_add_ would also keep its [N k, H] source.
        rows = token_of.unsqueeze(1).expand(-1, flat.shape[-1])
        out = torch.zeros_like(flat).scatter_add_(0, rows, out_sorted.to(flat.dtype))
        if hasattr(self, "shared_expert"):
            out = out + torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        if self.training and torch.is_grad_enabled():
            out = self._balance(out, counts, probs, experts, shape[0] if len(shape) == 3 else 1)
        out = out.reshape(shape)
        if hasattr(self, "shared_experts"):
            out = out + self.shared_experts(x)
        return out

    # Eager under torch.compile (`balance_eagerly`): the pools are Python state, and the activation-checkpoint
    # query below is one dynamo cannot trace (a graph break between the loss and its attachment lost the
    # gradient, torch 2.13; tests/trainer/fused/test_fused_runtime.py checks it).
    def _balance(self, out: torch.Tensor, counts: torch.Tensor, probs: torch.Tensor, experts: torch.Tensor,
                 batch: int) -> torch.Tensor:
        """`out` with the load-balancing loss attached; records the load (not in an activation recompute)."""
        global_counts, tokens, sequences = self._global_totals(counts, probs.shape[0], batch)
        recompute = torch._C._current_graph_task_id() != -1  # an activation-checkpoint recompute in backward
        scale = self.aux_loss_coef * self.aux_grad_scale
        if self.load_balancing == "aux_loss":
            pool = self.switch_pools.current if recompute else self.switch_pools.pool_for(id(self))
            if not recompute:
                pool.add(id(self), global_counts, tokens)
            out = PooledSwitchLoss.apply(out, probs.sum(dim=0), pool, scale, None if recompute else self.stats)
        elif self.load_balancing == "seq_aux_loss":
            share = sequence_aux_share(probs, experts, batch, sequences, self.top_k)
            out = AttachAuxLoss.apply(out, share * scale)
            if not recompute:
                self.stats.add_aux(share)
        if not recompute:
            self.stats.add(global_counts)
            self.step_counts = global_counts if self.step_counts is None else self.step_counts + global_counts
        return out

    def _global_totals(self, counts: torch.Tensor, tokens: int, batch: int) -> tuple[torch.Tensor, float, float]:
        """(routed pairs per expert, tokens, sequences), summed over the DP group."""
        with torch.no_grad():
            totals = torch.cat([counts.float(), counts.new_tensor([tokens, batch]).float()])
            if self.aux_group is not None and dist.is_initialized():
                dist.all_reduce(totals, group=self.aux_group)
        return totals[:-2], float(totals[-2]), float(totals[-1])


def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


@torch.no_grad()
def update_expert_bias(model: nn.Module) -> None:
    """The aux-loss-free step of each MoE layer with a bias update rate: bias += rate * sign(mean - load)
    over the tokens the layer routed since the last update (the optimizer step's global batch)."""
    for layer in moe_layers(model):
        counts, layer.step_counts = layer.step_counts, None
        if counts is None or not layer.bias_update_rate:
            continue
        delta = torch.sign(counts.mean() - counts) * layer.bias_update_rate
        add_to_parameter(layer.gate.e_score_correction_bias, delta)


def named_moe_layers(model: nn.Module) -> list[tuple[int, MoE]]:
    """(decoder layer index, its MoE) for each MoE layer (-1 where the name carries no layer index)."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, MoE):
            match = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
            out.append((int(match.group(1)) if match else -1, module))
    return out


def balance_eagerly(model: nn.Module) -> None:
    """Before torch.compile: each MoE layer's balancing stays out of the compiled graph (see MoE._balance).
    Applied by the compile step, so that a model never compiled does not import dynamo (seconds per process)."""
    import torch._dynamo

    for layer in moe_layers(model):
        layer._balance = torch._dynamo.disable(layer._balance)


def share_switch_pools(model: nn.Module) -> None:
    """One pool for all MoE layers of `model`, so that the Switch loss pools them as transformers' does."""
    pools = SwitchPools()
    for layer in moe_layers(model):
        layer.switch_pools = pools


def collect_router_stats(model: nn.Module, group=None, steps: int = 1) -> Optional[dict[str, Any]]:
    """The routing since the last call (`steps` optimizer steps), then reset; None for a dense model.
    `moe_aux_loss`: the load-balancing loss without its coefficient (what the coefficient multiplies: the
    pooled Switch loss, or the sum of the layers' sequence-wise losses), mean over micro-batches; absent with
    load balancing `none`. Expert load, in (token, slot) pairs of one step over the whole DP batch (mean
    over the steps): `expert_load_min` / `expert_load_max` over all layers, `expert_load_cv` the largest
    coefficient of variation of a layer, and `expert_load` per layer {layer, min, max, cv}.
    Collective over `group` (the DP group) when the model has MoE layers."""
    named = named_moe_layers(model)
    if not named or named[0][1].stats.tokens_per_expert is None:
        return None
    layers = [m for _, m in named]
    aux = torch.stack([torch.as_tensor(m.stats.aux_loss).float() / max(m.stats.micro_batches, 1) for m in layers])
    if group is not None and dist.is_initialized():
        dist.all_reduce(aux, group=group)  # the shares of the DP ranks
    loads = torch.stack([m.stats.tokens_per_expert for m in layers]) / max(steps, 1)
    for m in layers:
        m.stats.reset()
    per_layer = [{"layer": index, **load_summary(load)} for (index, _), load in zip(named, loads)]
    out = {"expert_load_min": float(loads.min()), "expert_load_max": float(loads.max()),
           "expert_load_cv": max(row["cv"] for row in per_layer), "expert_load": per_layer}
    if any(m.load_balancing != "none" for m in layers):
        out["moe_aux_loss"] = float(aux.sum())
    return out
