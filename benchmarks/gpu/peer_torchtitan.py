"""The peer run: torchtitan's Llama 3 model and its ``parallelize_llama`` under a minimal training loop.

torchtitan's own ``Trainer`` imports ``datasets`` (pyarrow, pandas), ``tensorboard`` and ``wandb`` at module level;
with their dependencies they outgrow the 64 MiB a GPU call may carry, so its loop cannot run on the lent machine.
What runs here is torchtitan's **model** (``model_registry(flavor)``: fused QKV, its RoPE, its init) and its
**parallelize function** (``parallelize_llama``: FSDP2 with bf16 params / fp32 reduce on a one-GPU mesh, its
per-block ``torch.compile``, its activation checkpointing), its cross-entropy loss, and fused AdamW, in a loop
written here that mirrors ``Trainer.train_step`` (forward, loss, backward, clip, step, zero). Label it
"torchtitan's model and parallelize under a minimal loop", never "torchtitan".

Same shape, batch, warm-up and timed steps as ``bench.py``; mock data (uniform random tokens). The FLOP count is
the bundled trainer's own (``trainer.components.metrics.flops_per_token``): 6 N + 6 L d S per token, N every
parameter once (Llama-3.2-1B ties the LM head to the embedding: counted once, as its GEMM; the lookup is free),
attention at causal cost (half of 12 L d S). Both trainers' MFU use it, so their ratio is the tokens/s ratio.

    python benchmarks/gpu/peer_torchtitan.py --flavor 1B --batch 4 --seq 4096 --steps 40 --warmup 5 -o peer.json
    python benchmarks/gpu/peer_torchtitan.py --smoke    # CPU: the debug flavour, 3 steps, gloo
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flavor", default="1B", help="torchtitan's Llama 3 flavour (1B = Llama-3.2-1B's widths)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--steps", type=int, default=40, help="timed steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--attn", default="flex",
                   help="torchtitan attention backend: flex, flex_flash or varlen (0.3 dropped sdpa for LMs)")
    p.add_argument("--gpu-type", default="h200")
    p.add_argument("--budget-s", type=float, default=150.0, help="stop after the step that passes this")
    p.add_argument("-o", "--output", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="CPU, debug flavour, 3 steps: checks the wiring")
    args = p.parse_args(argv)
    if args.smoke:
        args.flavor, args.batch, args.seq, args.steps, args.warmup, args.gpu_type = "debugmodel", 2, 64, 2, 1, "cpu"
        args.no_compile = True
    return args


def _init_one_process(device_type: str) -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", rank=0, world_size=1)


def build(args: argparse.Namespace, device):
    """torchtitan's model for the flavour, parallelized by torchtitan, initialised on ``device``."""
    import torch
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.models.llama3 import model_registry

    if device.type == "cpu":
        # torchtitan takes "cuda" when no accelerator is found; the CPU smoke run points its mesh at the CPU.
        import torchtitan.distributed.parallel_dims as titan_dims

        titan_dims.device_type = "cpu"
    spec = model_registry(args.flavor, attn_backend=args.attn)
    parallel_dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, world_size=1)
    parallel_dims.build_mesh()
    training = TrainingConfig(local_batch_size=args.batch, seq_len=args.seq, steps=args.warmup + args.steps,
                              mixed_precision_param="bfloat16", mixed_precision_reduce="float32")
    with torch.device("meta"):
        model = spec.model.build()
    model = spec.parallelize_fn(model, parallel_dims=parallel_dims, training=training,
                                parallelism=ParallelismConfig(),
                                compile_config=CompileConfig(enable=not args.no_compile, components=["model", "loss"]),
                                ac_config=None, dump_folder="/tmp/peer-torchtitan")
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights(buffer_device=device)
    if device.type == "cpu":
        _cpu_attention(model)
    model.train()
    return model, spec


def _causal_sdpa():
    """Stands in for torchtitan's inner attention in the CPU smoke run only: flex and varlen attention have no CPU
    backward. Same call as torchtitan's inner attention ((B, L, N, H) in and out)."""
    import torch
    import torch.nn.functional as F

    class CausalSdpa(torch.nn.Module):
        def forward(self, q, k, v, *, attention_masks=None, scale=None, enable_gqa=False, **_):
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=True, scale=scale, enable_gqa=enable_gqa)
            return out.transpose(1, 2)

    return CausalSdpa()


def _cpu_attention(model) -> None:
    for module in model.modules():
        if hasattr(module, "inner_attention"):
            module.inner_attention = _causal_sdpa()


def count_params(model, spec) -> tuple[int, int, int]:
    """(parameters, each shared tensor once; layers; width) of the model as built."""
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    return total, len(spec.model.layers), spec.model.dim


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import torch
    from torchtitan.components.loss import cross_entropy_loss

    from trainer.components.metrics import device_peak_flops, flops_per_token

    device_type = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    _init_one_process(device_type)
    device = torch.device(device_type, 0) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model, spec = build(args, device)
    total, layers, dim = count_params(model, spec)
    vocab = spec.model.vocab_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device_type == "cuda")
    per_token = flops_per_token(total, layers, dim, args.seq)
    peak = device_peak_flops(args.gpu_type, "bf16", device_type)
    times, losses, start = [], [], time.perf_counter()
    report: dict = {"peer": "torchtitan's model and parallelize_llama under a minimal loop", "flavor": args.flavor,
                    "torchtitan": _version("torchtitan"), "torch": torch.__version__, "batch": args.batch,
                    "seq": args.seq, "compile": not args.no_compile, "attn": args.attn, "params": total,
                    "flops_per_token": per_token, "device": _device_name(device_type)}
    # One document per sample, as mock data has: positions 0..S-1, and the causal mask torchtitan's Trainer builds
    # from them for its masked attention backends (flex, varlen), once for the fixed shape.
    positions = torch.arange(args.seq, device=device).expand(args.batch, args.seq)
    masks = model.get_attention_masks(positions=positions)
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device=device)
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        if device_type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(inputs, positions=positions, attention_masks=masks)
        # torchtitan's loss sums over tokens; its Trainer divides by the global count of valid tokens.
        loss = cross_entropy_loss(logits, labels) / labels.numel()
        del logits
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device_type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach()))
        if step >= args.warmup:
            times.append(dt)
        report.update(_figures(times, args, per_token, peak), losses=losses, complete=False)
        _write(report, args.output)
        if time.perf_counter() - start + dt > args.budget_s:
            report["stopped_by"] = "budget"
            break
    report["complete"] = len(times) == args.steps
    if device_type == "cuda":
        report["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        report["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    _write(report, args.output)
    print(json.dumps({k: v for k, v in report.items() if k != "losses"}))
    import torch.distributed as dist

    dist.destroy_process_group()
    return 0 if times and all(map(_finite, losses)) else 1


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def _figures(times: list[float], args, per_token: float, peak) -> dict:
    if not times:
        return {"timed_steps": 0}
    step = statistics.median(times)
    tps = args.batch * args.seq / step
    return {"timed_steps": len(times), "step_time_s": step, "tokens_per_s": tps,
            "mfu": (tps * per_token / peak) if peak else None}


def _write(report: dict, path) -> None:
    if path is not None:
        Path(path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def _device_name(device_type: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device_type == "cuda" else "cpu"


if __name__ == "__main__":
    sys.exit(main())
