"""Distributed training must equal one process on the same global batch.

Run by tests/trainer/distributed/test_parallel_dist.py under `torch.distributed.run` (gloo, CPU). For each requested
case the ranks train a tiny decoder for a few AdamW steps under FSDP2, DDP or tensor parallel
(optionally built on the meta device, with activation checkpointing or the chunked loss); rank 0
also trains the same model in plain single-process form on the whole batch and writes both loss
curves and the largest gradient / weight differences to OUT/<case>.json. Every rank writes the
losses it saw to OUT/<case>.rank<R>.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.components.peft import apply_lora
from trainer.distributed.parallelize import build_mesh, full_state_dict, parallelize_model
from trainer.loss import causal_lm_loss
from trainer.models import build_causal_lm
from trainer.models.builder import named_parameters_hf
from trainer.models.presets import tiny_config

# case: (tiny family, strategy, tp_size, sequence_parallel, activation_checkpointing, build on meta,
#        chunked loss, LoRA)
CASES = {
    "fsdp2": ("llama3", "fsdp2", 1, False, "full", True, True, False),
    "ddp": ("qwen2", "ddp", 1, False, "selective", False, False, False),
    "fsdp2_lora": ("qwen3_tied", "fsdp2", 1, False, "none", True, False, True),
    "tp_sp": ("qwen3_tied", "fsdp2", 2, True, "none", True, False, False),
    "tp": ("qwen2", "fsdp2", 2, False, "none", False, False, False),
    "fsdp2_tp": ("qwen3_tied", "fsdp2", 2, True, "selective", True, False, False),
    "ddp_bf16_reduce": ("qwen2", "ddp", 1, False, "none", False, False, False),
    "fsdp2_bf16_reduce": ("llama3", "fsdp2", 1, False, "none", True, False, False),
}
# Cases whose gradients cross the wire in bf16 (distributed.grad_reduce_dtype: bf16).
BF16_REDUCE = {"ddp_bf16_reduce", "fsdp2_bf16_reduce"}
LORA = dict(rank=4, alpha=8.0, dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])
STEPS, GLOBAL_BATCH, SEQ_LEN, SEED = 3, 4, 8, 7


def batches(vocab_size: int, seq_len: int = SEQ_LEN) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """STEPS global batches of random tokens, the same on every rank (the other equivalence scripts share them)."""
    gen = torch.Generator().manual_seed(SEED)
    out = []
    for _ in range(STEPS):
        ids = torch.randint(0, vocab_size, (GLOBAL_BATCH, seq_len), generator=gen)
        labels = torch.roll(ids, -1, dims=1)
        # Uneven masking so ranks hold different numbers of label tokens.
        labels[torch.rand(labels.shape, generator=gen) < 0.3] = -100
        labels[:, -1] = -100
        out.append((ids, labels))
    return out


def full_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    grads = {}
    for name, param in named_parameters_hf(model):
        grad = param.grad
        if grad is None:
            continue
        grads[name] = (grad.full_tensor() if isinstance(grad, DTensor) else grad).detach().clone()
    return grads


def train(model, data, *, dp_rank=0, dp_size=1, dp_group=None, chunked=False):
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.01)
    local_batch = GLOBAL_BATCH // dp_size
    losses, first_grads = [], None
    for step, (ids, labels) in enumerate(data):
        rows = slice(dp_rank * local_batch, (dp_rank + 1) * local_batch)
        loss_sum, num_tokens = causal_lm_loss(model, ids[rows], labels[rows], chunked=chunked, chunk_size=5)
        stats = torch.tensor([loss_sum.item(), float(num_tokens)], dtype=torch.float64)
        if dp_group is not None:
            dist.all_reduce(stats, group=dp_group)
        # Data-parallel averaging divides gradients by dp_size; scale back to a global token mean.
        (loss_sum * dp_size / stats[1].item()).backward()
        losses.append((stats[0] / stats[1]).item())
        if step == 0:
            first_grads = full_grads(model)
        optimizer.step()
        optimizer.zero_grad()
    return losses, first_grads, full_state_dict(model)


def bf16_exact(grads: dict) -> bool:
    """Whether every gradient is a bf16 value: what a reduction in bf16 leaves, and an fp32 one does not."""
    return all(torch.equal(g.to(torch.bfloat16).float(), g.float()) for g in grads.values())


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def run_case(case: str, out: Path, config_dir: Path) -> None:
    family, strategy, tp_size, sp, ac, on_meta, chunked, lora = CASES[case]
    world, rank = dist.get_world_size(), dist.get_rank()
    config_path = config_dir / f"{family}.json"
    data = batches(tiny_config(family).vocab_size)

    def build(device: str):
        model = build_causal_lm(str(config_path), device=device, seed=SEED)
        return apply_lora(model, **LORA) if lora else model

    mesh = build_mesh(world, tp_size, "cpu")
    model = build("meta" if on_meta else "cpu")
    init = full_state_dict(build("cpu"))
    model = parallelize_model(model, mesh, strategy=strategy, tp_size=tp_size, sequence_parallel=sp,
                              activation_checkpointing=ac, precision="fp32", device="cpu",
                              grad_reduce_dtype="bf16" if case in BF16_REDUCE else "fp32")
    init_diff = max_diff(full_state_dict(model), init)
    dp_mesh = mesh["dp"]
    losses, grads, final = train(model, data, dp_rank=dp_mesh.get_local_rank(), dp_size=dp_mesh.size(),
                                 dp_group=dp_mesh.get_group(), chunked=chunked)
    (out / f"{case}.rank{rank}.json").write_text(json.dumps({"losses": losses}))
    if rank == 0:
        reference = build("cpu")
        ref_losses, ref_grads, ref_final = train(reference, data)
        result = {
            "losses": losses,
            "reference_losses": ref_losses,
            "init_diff": init_diff,
            "grad_diff": max_diff(grads, ref_grads),
            "weight_diff": max_diff(final, ref_final),
            "weight_change": max_diff(ref_final, init),
            "grads_bf16_exact": bf16_exact(grads),
            "world_size": world,
        }
        (out / f"{case}.json").write_text(json.dumps(result))
    dist.barrier()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("cases", nargs="+", choices=sorted(CASES))
    args = parser.parse_args()
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    try:
        if dist.get_rank() == 0:
            for family in {case[0] for case in CASES.values()}:
                (args.out / f"{family}.json").write_text(json.dumps(tiny_config(family).to_hf()))
        dist.barrier()
        for case in args.cases:
            run_case(case, args.out, args.out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # gloo can abort in its destructors at interpreter exit; everything is written and flushed.
    os._exit(0)


if __name__ == "__main__":
    main()
