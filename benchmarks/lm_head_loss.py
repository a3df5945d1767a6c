"""The LM head + cross-entropy alone, forward and backward: the chunked fused loss against the plain
`F.linear` + `F.cross_entropy` and against its GEMM floor (the three [tokens, vocab] GEMMs with nothing
between them), in one process. Times are the best of `--repeats`; ratios are against the plain loss.

Run: .venv/bin/python benchmarks/lm_head_loss.py [--tokens 4096 --hidden 256 --vocab 32000 --threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.fused.linear_cross_entropy import default_chunk_size, linear_cross_entropy  # noqa: E402


def best_seconds(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.tokens, args.hidden, generator=gen, requires_grad=True)
    weight = (torch.randn(args.vocab, args.hidden, generator=gen) * 0.02).requires_grad_()
    labels = torch.randint(0, args.vocab, (args.tokens,), generator=gen)

    def backward(loss: torch.Tensor) -> None:
        loss.backward()
        hidden.grad = weight.grad = None

    def gemm_floor() -> None:
        with torch.no_grad():
            logits = hidden @ weight.t()
            logits @ weight, logits.t() @ hidden

    default = default_chunk_size(args.tokens, args.vocab, args.hidden, "cpu")
    runs = {
        "plain F.linear + F.cross_entropy (reference)":
            lambda: backward(F.cross_entropy(F.linear(hidden, weight), labels, reduction="sum")),
        "three GEMMs alone (floor)": gemm_floor,
    }
    for rows in sorted({default, 128, 512, 1024}):
        label = f"chunked, {rows} rows" + (" (default)" if rows == default else "")
        runs[label] = lambda rows=rows: backward(linear_cross_entropy(hidden, weight, labels, chunk_size=rows))
    seconds = {name: best_seconds(run, args.repeats) for name, run in runs.items()}
    reference = seconds["plain F.linear + F.cross_entropy (reference)"]
    flops = 3 * 2 * args.tokens * args.hidden * args.vocab
    print(f"tokens {args.tokens}, hidden {args.hidden}, vocab {args.vocab}, fp32, {args.threads} threads, "
          f"best of {args.repeats}")
    print("| loss | seconds | GFLOP/s | speed vs plain |")
    print("|---|---|---|---|")
    for name, value in seconds.items():
        print(f"| {name} | {value:.3f} | {flops / value / 1e9:.0f} | {reference / value:.2f}x |")


if __name__ == "__main__":
    main()
