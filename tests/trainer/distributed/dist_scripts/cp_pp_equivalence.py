"""Context parallel and pipeline parallel must equal one process on the same sequences.

Run by tests/trainer/distributed/test_cp_pp_dist.py under `torch.distributed.run` (gloo, CPU). For each case
the ranks train a tiny decoder for 3 AdamW steps on a (pp, dp, cp) mesh; rank 0 also trains the same model as
one plain process on the whole batch and writes both loss curves and the largest gradient / weight differences
to OUT/<case>.json. The pipeline cases also validate after the first and the last step (a forward through the
stages, on a batch twice the training sequences' length) beside the reference's validation loss.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from parallel_equivalence import GLOBAL_BATCH, SEED, batches, full_grads, max_diff

from trainer.distributed.context_parallel import SequenceSharder, apply_context_parallel
from trainer.distributed.mesh import build_layout_mesh, gradient_mesh
from trainer.distributed.parallelize import full_state_dict, parallelize_model
from trainer.loss import causal_lm_loss
from trainer.models import build_causal_lm
from trainer.models.presets import tiny_config

# case: (tiny family, layers, strategy, cp, pp, vp, schedule, micro batches per step)
CASES = {
    "cp2": ("llama3", 2, "fsdp2", 2, 1, 1, None, 1),
    "cp2_window": ("mistral", 2, "fsdp2", 2, 1, 1, None, 1),
    "cp2_ddp": ("qwen2", 2, "ddp", 2, 1, 1, None, 1),
    "cp2_dp2": ("llama3", 2, "fsdp2", 2, 1, 1, None, 1),
    "cp2_tp2": ("qwen3", 2, "fsdp2", 2, 1, 1, None, 1),  # tensor parallel 2 inside each CP rank
    "pp2": ("llama", 3, "fsdp2", 1, 2, 1, "1f1b", 4),
    "pp2_vp2": ("qwen3", 4, "fsdp2", 1, 2, 2, "interleaved_1f1b", 4),
    "pp2_dp2": ("llama", 3, "fsdp2", 1, 2, 1, "1f1b", 2),
}
SEQ_LEN = 16  # the shared batches at a length CP 2 cuts into 4 chunks of 4
VALIDATE_AFTER = (0, 2)  # steps after which the pipeline cases validate


def validation_batch(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return batches(vocab_size, 2 * SEQ_LEN)[0]  # another shape than the training micro batches
TENSOR_PARALLEL = {"cp2_tp2": 2}


def train_reference(model, data, validation):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    losses, first_grads, val_losses = [], None, []
    for step, (ids, labels) in enumerate(data):
        loss_sum, num_tokens = causal_lm_loss(model, ids, labels, chunked=False)
        (loss_sum / num_tokens).backward()
        losses.append((loss_sum / num_tokens).item())
        if step == 0:
            first_grads = full_grads(model)
        optimizer.step()
        optimizer.zero_grad()
        if step in VALIDATE_AFTER:
            with torch.no_grad():
                val_sum, val_tokens = causal_lm_loss(model, *validation, chunked=False)
            val_losses.append(val_sum.item() / val_tokens)
    return losses, first_grads, full_state_dict(model), val_losses


def train_context_parallel(model, data, mesh):
    dp_mesh, grad_mesh = mesh["dp"], gradient_mesh(mesh)
    sharder = SequenceSharder(mesh["cp"].size(), mesh["cp"].get_local_rank())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    local_batch = GLOBAL_BATCH // dp_mesh.size()
    rows = slice(dp_mesh.get_local_rank() * local_batch, (dp_mesh.get_local_rank() + 1) * local_batch)
    losses, first_grads = [], None
    for step, (ids, labels) in enumerate(data):
        ids, labels, positions = sharder(ids[rows], labels[rows])
        loss_sum, num_tokens = causal_lm_loss(model, ids, labels, position_ids=positions, chunked=False)
        stats = torch.tensor([loss_sum.item(), float(num_tokens)], dtype=torch.float64)
        dist.all_reduce(stats, group=grad_mesh.get_group())
        (loss_sum * grad_mesh.size() / stats[1].item()).backward()
        losses.append((stats[0] / stats[1]).item())
        if step == 0:
            first_grads = full_grads(model)
        optimizer.step()
        optimizer.zero_grad()
    return losses, first_grads, full_state_dict(model)


def pipeline_validation_loss(runner, dp_mesh, ids, labels) -> float:
    """The validation loss of the global batch (ids, labels): each data-parallel rank forwards its rows through
    the stages."""
    local = ids.shape[0] // dp_mesh.size()
    rows = slice(dp_mesh.get_local_rank() * local, (dp_mesh.get_local_rank() + 1) * local)
    loss_sum = runner.evaluate(ids[rows], labels[rows])
    runner.end_evaluation()
    counts = torch.tensor(float((labels[rows] != -100).sum()), dtype=torch.float64)
    for total in (loss_sum, counts):
        dist.all_reduce(total, group=dp_mesh.get_group())
    return loss_sum.item() / counts.item()


def train_pipeline(config_path, mesh, data, layers, vp, schedule, micro_batches, strategy, validation):
    from trainer.distributed.pipeline import PipelineRunner, build_pipeline

    model = build_causal_lm(str(config_path), device="meta", seed=SEED)
    pipeline = build_pipeline(model, mesh, vp_size=vp, schedule=schedule, strategy=strategy, precision="fp32",
                              activation_checkpointing="none", device=torch.device("cpu"),
                              micro_batches=micro_batches)
    runner = PipelineRunner(pipeline, mesh)
    optimizer = torch.optim.AdamW(pipeline.model.parameters(), lr=1e-3, weight_decay=0.01)
    dp_mesh = mesh["dp"]
    local_batch = GLOBAL_BATCH // dp_mesh.size()
    rows = slice(dp_mesh.get_local_rank() * local_batch, (dp_mesh.get_local_rank() + 1) * local_batch)
    losses, first_grads, val_losses = [], None, []
    for step, (ids, labels) in enumerate(data):
        counts = torch.tensor([float((labels[rows] != -100).sum())], dtype=torch.float64)
        dist.all_reduce(counts, group=dp_mesh.get_group())
        loss_sum = runner.step(ids[rows], labels[rows], scale=dp_mesh.size() / counts.item())
        dist.all_reduce(loss_sum, group=dp_mesh.get_group())
        losses.append(loss_sum.item() / counts.item())
        if step == 0:
            first_grads = runner.gather_full(full_grads(pipeline.model))
        optimizer.step()
        optimizer.zero_grad()
        if step in VALIDATE_AFTER:  # between steps: the training that follows must not notice
            val_losses.append(pipeline_validation_loss(runner, dp_mesh, *validation))
    return losses, first_grads, runner.gather_full(full_state_dict(pipeline.model)), val_losses


def run_case(case: str, out: Path) -> None:
    family, layers, strategy, cp, pp, vp, schedule, micro_batches = CASES[case]
    world, rank = dist.get_world_size(), dist.get_rank()
    config_path = out / f"{case}.config.json"
    if rank == 0:
        config_path.write_text(json.dumps(tiny_config(family, num_hidden_layers=layers).to_hf()))
    dist.barrier()
    data = batches(tiny_config(family).vocab_size, SEQ_LEN)
    validation = validation_batch(tiny_config(family).vocab_size)
    init = full_state_dict(build_causal_lm(str(config_path), device="cpu", seed=SEED))
    tp = TENSOR_PARALLEL.get(case, 1)
    mesh = build_layout_mesh(world, tp_size=tp, cp_size=cp, pp_size=pp)
    val_losses = None
    if pp > 1:
        losses, grads, final, val_losses = train_pipeline(config_path, mesh, data, layers, vp, schedule,
                                                          micro_batches, strategy, validation)
    else:
        model = parallelize_model(build_causal_lm(str(config_path), device="meta", seed=SEED), mesh,
                                  strategy=strategy, tp_size=tp, precision="fp32", device="cpu")
        apply_context_parallel(model, mesh["cp"])
        losses, grads, final = train_context_parallel(model, data, mesh)
    (out / f"{case}.rank{rank}.json").write_text(json.dumps({"losses": losses, "val_losses": val_losses}))
    if rank == 0:
        ref_losses, ref_grads, ref_final, ref_val = train_reference(build_causal_lm(str(config_path), seed=SEED), data,
                                                                    validation)
        result = {"losses": losses, "reference_losses": ref_losses, "grad_diff": max_diff(grads, ref_grads),
                  "weight_diff": max_diff(final, ref_final), "weight_change": max_diff(ref_final, init),
                  "world_size": world, "val_losses": val_losses, "reference_val_losses": ref_val}
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
        for case in args.cases:
            run_case(case, args.out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)  # gloo can abort in its destructors at interpreter exit; everything is written


if __name__ == "__main__":
    main()
