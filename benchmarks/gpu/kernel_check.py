"""Each fused path of the trainer against its reference on one device: loss/output and gradients.

The plain-torch functions ("torch") everywhere, and Liger's Triton kernels ("liger") on CUDA when
liger-kernel is installed: RMSNorm, SwiGLU, RoPE and the fused linear + cross-entropy, in bf16 on a
GPU (Llama-3.2-1B widths) and fp32 on CPU (a quick stand-in). A path passes when the largest
relative error (norm of the difference over norm of the reference) of its outputs and input
gradients is below 2e-2 in bf16, 1e-4 in fp32.

    python benchmarks/gpu/kernel_check.py [--device cuda|cpu] [--out-dir DIR]   # exit 1 on a failure
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BF16_TOLERANCE, FP32_TOLERANCE = 2e-2, 1e-4


def check_kernels(device: str) -> list[dict]:
    """One result per (op, implementation): {op, kernels, max_relative_error, tolerance, ok, seconds}."""
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
    tolerance = BF16_TOLERANCE if dt == torch.bfloat16 else FP32_TOLERANCE
    results = []
    for name, (fn, inputs) in cases.items():
        ref_out, ref_grads = _run(fn, "reference", inputs)
        for kern in kernels:
            started = time.perf_counter()
            try:
                out, grads = _run(fn, kern, inputs)
                error = max(_rel_err(a, b) for a, b in zip(out + grads, ref_out + ref_grads))
                problem = None
            except Exception as exc:  # a kernel that does not run on this device is a failed check, not a crash
                error, problem = None, f"{type(exc).__name__}: {exc}"[:500]
            results.append({"op": name, "kernels": kern, "max_relative_error": error, "tolerance": tolerance,
                            "ok": error is not None and error < tolerance,
                            "seconds": round(time.perf_counter() - started, 3),
                            "error": problem})
    return results


def _run(fn, kern, inputs):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(kern, *leaves)
    outs = list(out) if isinstance(out, tuple) else [out]
    sum(o.float().sum() * (i + 1) for i, o in enumerate(outs)).backward()
    return [o.detach().float() for o in outs], [t.grad.float() for t in leaves]


def _rel_err(a, b) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def print_results(results: list[dict]) -> None:
    for r in results:
        status = "ok" if r["ok"] else "FAIL"
        if r["error"]:
            measured = f"did not run ({r['error']})"
        else:
            measured = f"max relative error {r['max_relative_error']:.2e}"
        print(f"{r['op']:22s} {r['kernels']:6s} vs reference: {measured} {status}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out-dir", type=Path, help="write kernel_check.json here")
    parser.add_argument("--smoke", action="store_true", help="the checks on CPU (the suite runs it)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.device = "cpu"
    return run(args.device, args.out_dir)


def run(device: str, out_dir: Path | None) -> int:
    import torch
    from throughput_row import write_json

    results = check_kernels(device)
    print_results(results)
    if out_dir is not None:
        name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
        write_json(out_dir / "kernel_check.json", {"device": name, "torch": torch.__version__, "results": results,
                                                   "ok": all(r["ok"] for r in results)})
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
