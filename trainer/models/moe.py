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

The load-balancing loss is computed over the whole data-parallel batch: the per-expert token
fractions f_i are summed over the DP group (no gradient), so the loss, and its gradient, equal
those of one process on the whole batch. It joins the backward pass through `AttachAuxLoss` (as
Megatron-LM's MoEAuxLossAutoScaler), so the loss function and the loop need not know about it.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainer.fused.ops import silu_mul
from trainer.models.moe_config import MoEConfig


def local_tensor(param: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor parameter (expert parallel), the tensor itself otherwise."""
    return param.to_local() if hasattr(param, "to_local") else param


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
        if self.sigmoid:
            return self._sigmoid_route(x)
        probs = F.softmax(F.linear(x, self.weight).float(), dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, experts, probs

    def _sigmoid_route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
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
    """What one MoE layer routed since the last `reset`: tokens per expert and the aux-loss share."""

    def __init__(self) -> None:
        self.tokens_per_expert: Optional[torch.Tensor] = None
        self.aux_loss = 0.0
        self.micro_batches = 0

    def add(self, tokens_per_expert: torch.Tensor, aux_share: torch.Tensor) -> None:
        counts = tokens_per_expert.detach()
        self.tokens_per_expert = counts if self.tokens_per_expert is None else self.tokens_per_expert + counts
        self.aux_loss = self.aux_loss + aux_share.detach()
        self.micro_batches += 1

    def reset(self) -> None:
        self.__init__()


class MoE(nn.Module):
    """Router + experts, and when given: Qwen2-MoE's `shared_expert` (a dense MLP every token passes
    through, scaled by a sigmoid gate) or DeepSeek-V3's `shared_experts` (the same, ungated). `aux_group`
    (the data-parallel group) and `aux_grad_scale` are set by the recipe: the DP size over the number of
    gradient-accumulation micro-batches (see the module doc). A coefficient of 0 (DeepSeek-V3's
    aux-loss-free balancing) attaches no loss; the load is still recorded."""

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
        self.aux_loss_coef = moe.router_aux_loss_coef
        self.dispatcher = LocalDispatcher()
        self.aux_group = None
        self.aux_grad_scale = 1.0
        self.stats = MoEStats()

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
            aux_share, global_counts = self._aux_loss_share(counts, probs)
            if self.aux_loss_coef:
                out = AttachAuxLoss.apply(out, aux_share * (self.aux_loss_coef * self.aux_grad_scale))
            self._record(global_counts, aux_share)
        out = out.reshape(shape)
        if hasattr(self, "shared_experts"):
            out = out + self.shared_experts(x)
        return out

    def _aux_loss_share(self, counts: torch.Tensor, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of E * sum_i f_i P_i over the DP batch: f_i the fraction of routed
        (token, slot) pairs on expert i, P_i the mean router probability of expert i. The shares of
        the DP ranks sum to the loss of the whole batch (f is summed first, P is linear in the tokens)."""
        with torch.no_grad():
            totals = torch.cat([counts.float(), counts.new_tensor([probs.shape[0]]).float()])
            if self.aux_group is not None and dist.is_initialized():
                dist.all_reduce(totals, group=self.aux_group)
            global_counts, global_tokens = totals[:-1], totals[-1]
            fraction = global_counts / (global_tokens * self.top_k)
        share = self.num_experts * (fraction * probs.sum(dim=0)).sum() / global_tokens
        return share, global_counts

    # Called after AttachAuxLoss: dynamo cannot trace the graph-task query, and with the graph break
    # it causes between the aux loss and AttachAuxLoss, a compiled block lost the aux loss's gradient
    # (torch 2.13; tests/trainer/fused/test_fused_runtime.py checks it).
    def _record(self, global_counts: torch.Tensor, share: torch.Tensor) -> None:
        if torch._C._current_graph_task_id() == -1:  # not an activation-checkpoint recompute in backward
            self.stats.add(global_counts, share)


def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


def collect_router_stats(model: nn.Module, group=None, steps: int = 1) -> Optional[dict[str, float]]:
    """{moe_aux_loss, expert_load_min, expert_load_max} over the `steps` optimizer steps since the last
    call, then reset; None for a dense model. aux loss: mean over MoE layers and micro-batches of the
    loss, without its coefficient; expert load: (token, slot) pairs routed to the least and the most
    loaded expert of any layer in one step (mean over the steps), over the whole DP batch.
    Collective over `group` (the DP group) when the model has MoE layers."""
    layers = moe_layers(model)
    if not layers or layers[0].stats.tokens_per_expert is None:
        return None
    aux = torch.stack([torch.as_tensor(m.stats.aux_loss).float() / max(m.stats.micro_batches, 1) for m in layers])
    if group is not None and dist.is_initialized():
        dist.all_reduce(aux, group=group)  # the shares of the DP ranks
    loads = torch.stack([m.stats.tokens_per_expert for m in layers]) / max(steps, 1)
    for m in layers:
        m.stats.reset()
    return {"moe_aux_loss": float(aux.mean()), "expert_load_min": float(loads.min()),
            "expert_load_max": float(loads.max())}
