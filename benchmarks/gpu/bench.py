"""Train a Llama-3.2-1B-shaped model with the bundled trainer on one GPU and report speed and memory.

The real recipe (`TrainFinetuneRecipe`) runs in this process: random init of the bundled
`llama32-1b` config (16 layers, hidden 2048, vocab 128256, tied embeddings), bf16 through FSDP2's
mixed-precision policy on a one-GPU mesh, `torch.compile` per block, the fused linear +
cross-entropy, fused AdamW, mock data at seq 4096. It prints tokens/s and MFU (PaLM's
6N + 12·L·d·S FLOPs per token over the dense bf16 peak of the GPU's hardware card), the peak
memory next to the planner's estimate (service/estimate/memory.py, engine "bundled"), and the time taken.

    python benchmarks/gpu/bench.py                      # on the GPU (run.sh sets it up)
    python benchmarks/gpu/bench.py --check-kernels      # fused kernels vs fallbacks on this GPU
    python benchmarks/gpu/bench.py --device cpu --tiny  # the same code path, tiny, on CPU

Exit 0 with the report; 1 when a kernel check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

# The tiny CPU stand-in: the same recipe path in seconds (tests/trainer/fused/test_gpu_benchmark_script.py).
TINY_MODEL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                  max_position_embeddings=4096)
GPU_NAMES = (("h200", "h200"), ("h100", "h100"), ("gh200", "gh200"), ("b200", "b200"), ("a100", "a100-80gb"))


def detect_gpu_type(device_name: str) -> str | None:
    """The hardware card of a CUDA device name ("NVIDIA H100 80GB HBM3" -> "h100"), else None."""
    lower = device_name.lower()
    for needle, card in GPU_NAMES:
        if needle in lower:
            return card
    return None


def recipe_config(args, out_dir: Path, model: str, gpu_type: str) -> dict:
    steps = args.warmup + args.steps
    return {
        "model": {"pretrained_model_name_or_path": model, "dtype": "float32"},
        "step_scheduler": {"global_batch_size": args.batch, "local_batch_size": args.batch, "max_steps": steps,
                           "log_interval": 1},
        "distributed": {"strategy": "fsdp2", "activation_checkpointing": args.recompute},
        "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": args.seq,
                    "num_samples": args.batch * steps, "seed": 1234},
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1},
        "lr_scheduler": {"schedule": "constant"},
        "loss_fn": {"chunked": "auto"},
        "compile": {"enabled": args.compile},
        "checkpoint": {"enabled": False, "checkpoint_dir": str(out_dir)},
        "precision": "fp8" if args.fp8 else "bf16",
        "hardware": {"gpu_type": gpu_type, "gpus_per_node": 1},
    }


def planner_estimate(model: str, args) -> dict:
    """The planner's per-GPU estimate for this run (GiB), from the model's config.json."""
    from recipe_index.models import card_from_config, find_bundled_model
    from service.estimate.memory import estimate_memory, model_shape
    from service.facts import Layout

    path = Path(model) / "config.json"
    card = card_from_config(json.loads(path.read_text()), "bench", str(path)) if path.is_file() \
        else find_bundled_model(model)
    est = estimate_memory(model_shape(card), Layout(micro_batch_size=args.batch, recompute=args.recompute),
                          world_size=1, seq_length=args.seq, sharding="full", engine="bundled",
                          cpu=args.device == "cpu", precision="bf16")
    return est.as_dict()


def run(args) -> dict:
    import torch

    from trainer.components.metrics import device_peak_flops, flops_per_token
    from trainer.contract.config import parse_config
    from trainer.distributed.dist import init_distributed
    from trainer.recipes.train_ft import TrainFinetuneRecipe

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny:
            from trainer.models.config import DecoderConfig

            model_dir = Path(tmp) / "tiny"
            model_dir.mkdir()
            (model_dir / "config.json").write_text(json.dumps(DecoderConfig(**TINY_MODEL).to_hf()))
            model = str(model_dir)
        else:
            model = "llama32-1b"
        if args.device == "cpu":
            gpu_type = "cpu"
        else:
            gpu_type = args.gpu_type or detect_gpu_type(torch.cuda.get_device_name()) or "h100"
        raw = recipe_config(args, Path(tmp) / "out", model, gpu_type)
        info = init_distributed("gloo" if args.device == "cpu" else "auto")
        recipe = TrainFinetuneRecipe(parse_config(raw), raw, info)
        recipe.setup()
        setup_s = time.perf_counter() - started
        recipe.run_train_validation_loop()
        rows = [json.loads(line) for line in (Path(tmp) / "out" / "training.jsonl").read_text().splitlines()]
        estimate = planner_estimate(model, args)
        config = recipe.model_config
    timed = rows[args.warmup:]
    tokens_per_step = args.batch * args.seq
    tps = tokens_per_step * len(timed) / sum(tokens_per_step / r["tps"] for r in timed)
    peak = device_peak_flops(gpu_type, "bf16", "cpu" if args.device == "cpu" else "cuda")
    fpt = flops_per_token(config.num_parameters(), config.num_hidden_layers, config.hidden_size, args.seq)
    report = {
        "gpu_type": gpu_type, "device": torch.cuda.get_device_name() if args.device != "cpu" else "cpu",
        "params": config.num_parameters(), "seq": args.seq, "batch": args.batch, "steps_timed": len(timed),
        "tokens_per_s": tps, "mfu_bf16_dense": fpt * tps / peak if peak else None,
        "peak_allocated_gib": rows[-1]["mem"],
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if args.device != "cpu" else None,
        "planner_estimate_gib": estimate, "setup_s": setup_s, "total_s": time.perf_counter() - started,
        "final_loss": rows[-1]["loss"],
    }
    return report


def print_report(r: dict) -> None:
    print(f"device {r['device']} (card {r['gpu_type']}), {r['params'] / 1e9:.2f}B params, batch {r['batch']} x seq "
          f"{r['seq']}, {r['steps_timed']} timed steps")
    print(f"tokens/s: {r['tokens_per_s']:,.0f}")
    mfu = (f"{r['mfu_bf16_dense']:.1%}" if r["mfu_bf16_dense"] is not None
           else "n/a (no dense bf16 peak for this device)")
    print(f"MFU (bf16 dense peak): {mfu}")
    est = r["planner_estimate_gib"]
    reserved = f", reserved {r['peak_reserved_gib']:.1f}" if r["peak_reserved_gib"] is not None else ""
    print(f"peak memory GiB: allocated {r['peak_allocated_gib']:.2f}{reserved}; planner estimate {est['total']:.2f} "
          f"(weights {est['weights']}, grads {est['grads']}, optimizer {est['optimizer']}, "
          f"activations {est['activations']}, other {est['other']})")
    print(f"time: setup {r['setup_s']:.0f} s, total {r['total_s']:.0f} s; final loss {r['final_loss']:.3f}")
    print("RESULT " + json.dumps(r))


def check_kernels(device: str) -> int:
    """Each fused path against its fallback on `device` (Liger too when installed and on CUDA)."""
    import torch

    from trainer.fused.linear_cross_entropy import linear_cross_entropy
    from trainer.fused.ops import rms_norm, rotary, silu_mul
    from trainer.fused.runtime import liger_available

    gen = torch.Generator(device=device).manual_seed(0)
    dt = torch.bfloat16 if device != "cpu" else torch.float32
    # Llama-3.2-1B widths on the GPU; a quick stand-in on CPU.
    hidden, ffn, heads, kv, vocab, tokens = (2048, 8192, 32, 8, 32000, 256) if device != "cpu" else \
        (256, 512, 8, 2, 4096, 64)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=gen).to(dt)

    x, w = randn(4, tokens, hidden), (1 + 0.1 * randn(hidden)).to(dt)
    g, u = randn(4, tokens, ffn), randn(4, tokens, ffn)
    q, k = randn(4, heads, tokens, 64), randn(4, kv, tokens, 64)
    pos = torch.arange(tokens, device=device).float()
    freqs = pos[:, None] * (1.0 / 500000 ** (torch.arange(0, 64, 2, device=device).float() / 64))
    emb = torch.cat((freqs, freqs), -1)[None]
    cos, sin = emb.cos().to(dt), emb.sin().to(dt)
    h, head = randn(4 * tokens, hidden), (0.02 * randn(vocab, hidden)).to(dt)
    labels = torch.randint(0, vocab, (4 * tokens,), device=device, generator=gen)
    cases = {
        "rms_norm": (lambda kern, a, b: rms_norm(a, b, 1e-5, kern), (x, w)),
        "silu_mul": (lambda kern, a, b: silu_mul(a, b, kern), (g, u)),
        "rotary": (lambda kern, a, b: rotary(a, b, cos, sin, kern), (q, k)),
        "linear_cross_entropy": (lambda kern, a, b: linear_cross_entropy(a, b, labels, kernels=kern)
                                 if kern != "reference" else
                                 torch.nn.functional.cross_entropy((a @ b.t()).float(), labels, reduction="sum"),
                                 (h, head)),
    }
    kernels = ["torch"] + (["liger"] if device == "cuda" and liger_available() else [])
    failures = 0
    for name, (fn, inputs) in cases.items():
        ref_out, ref_grads = _run(fn, "reference", inputs)
        for kern in kernels:
            out, grads = _run(fn, kern, inputs)
            errors = [_rel_err(a, b) for a, b in zip(out + grads, ref_out + ref_grads)]
            ok = max(errors) < (2e-2 if dt == torch.bfloat16 else 1e-4)
            failures += not ok
            print(f"{name:22s} {kern:6s} vs reference: max relative error {max(errors):.2e} {'ok' if ok else 'FAIL'}")
    return 1 if failures else 0


def _run(fn, kern, inputs):

    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(kern, *leaves)
    outs = list(out) if isinstance(out, tuple) else [out]
    sum(o.float().sum() * (i + 1) for i, o in enumerate(outs)).backward()
    return [o.detach().float() for o in outs], [t.grad.float() for t in leaves]


def _rel_err(a, b) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer stand-in model (for CPU checks)")
    parser.add_argument("--gpu-type", help="hardware card id (default: from the CUDA device name)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed first steps (compilation)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per step")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--fp8", action="store_true", help="precision fp8 (torchao float8 linears, sm89+)")
    parser.add_argument("--check-kernels", action="store_true", help="compare fused kernels with fallbacks, then exit")
    args = parser.parse_args(argv)
    if args.check_kernels:
        return check_kernels(args.device)
    print_report(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
