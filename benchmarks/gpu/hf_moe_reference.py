"""The MoE reference: ``transformers``' own model of the same MoE, trained the plain way, for bench.py's MoE phase.

Builds the model class transformers maps the card's ``model_type`` to (Qwen3-30B-A3B -> ``Qwen3MoeForCausalLM``,
which loops over its experts in Python) from the bundled card cut to ``--layers`` layers, exactly as bench.py cuts
it, in bf16 with SDPA, random init, and trains it on random tokens: ``model(input_ids, labels=labels).loss``,
backward, clip 1.0, AdamW (fused on CUDA), zero_grad — the loop from transformers' docs. Same batch, sequence,
warm-up and timed steps as bench.py's MoE phase; tokens/s, peak memory and MFU by the trainer's FLOP count
(6 x active parameters + 6 L d S per token), so the ratios with bench.py's report are like for like.

    python benchmarks/gpu/hf_moe_reference.py --model qwen3-30b-a3b --layers 4 --batch 2 --seq 4096 -o hf-moe.json
    python benchmarks/gpu/hf_moe_reference.py --smoke      # CPU, tiny-moe, 2 steps
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import model_path


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen3-30b-a3b")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--gpu-type", default="h200")
    p.add_argument("--time-budget", type=float, default=120.0, help="stop after the step that passes it")
    p.add_argument("-o", "--output", type=Path)
    p.add_argument("--smoke", action="store_true", help="CPU, the tiny MoE, 1 + 2 steps")
    args = p.parse_args(argv)
    args.tiny = args.smoke
    if args.smoke:
        args.model, args.layers, args.batch, args.seq, args.warmup, args.steps = "tiny-moe", None, 2, 64, 1, 2
        args.gpu_type = "cpu"
    return args


def main(argv=None) -> int:
    args = _parse(argv)
    import torch
    import transformers

    from trainer.components.metrics import device_peak_flops, flops_per_token
    from trainer.models.builder import resolve_config

    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with tempfile.TemporaryDirectory() as tmp:
        # bench.py's cut: a folder with the first --layers layers' config.json, or the bundled id itself.
        ours = resolve_config(model_path(argparse.Namespace(tiny=False, model=args.model, layers=args.layers),
                                         Path(tmp)))[0]
        hf_config = transformers.AutoConfig.for_model(**ours.to_hf())
    hf_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01,
                                  fused=device.type == "cuda")
    per_token = flops_per_token(ours.active_parameters(), ours.num_hidden_layers, ours.hidden_size, args.seq)
    peak = device_peak_flops(args.gpu_type, "bf16" if dtype == torch.bfloat16 else "fp32", device.type)
    report = {"reference": f"transformers {type(model).__name__}", "transformers": transformers.__version__,
              "torch": torch.__version__, "model": args.model, "layers": ours.num_hidden_layers,
              "batch": args.batch, "seq": args.seq, "dtype": str(dtype), "flops_per_token": per_token}
    times, losses, start = [], [], time.perf_counter()
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, ours.vocab_size, (args.batch, args.seq), device=device)
        _sync(device)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach()))
        if step >= args.warmup:
            times.append(dt)
        if times:
            tps = args.batch * args.seq / statistics.median(times)
            report.update(timed_steps=len(times), step_time_s=statistics.median(times), tokens_per_s=tps,
                          mfu=tps * per_token / peak if peak else None)
        report.update(losses=losses, complete=len(times) == args.steps)
        _write(report, args.output)
        if time.perf_counter() - start + dt > args.time_budget:
            report["stopped_by"] = "time budget"
            break
    if device.type == "cuda":
        report["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    _write(report, args.output)
    print(json.dumps({k: v for k, v in report.items() if k != "losses"}))
    return 0 if times else 1


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _write(report: dict, path) -> None:
    if path is not None:
        Path(path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
