"""Does DeepSeek-V3's aux-loss-free bias update keep the experts in use? Trains the bundled tiny-deepseek-v3
from scratch on a skewed synthetic corpus, twice from the same init and data: with the bias update (DeepSeek-V3's
rate, 1e-3) and without (the bias fixed at 0); both with DeepSeek-V3's sequence-wise loss at its alpha (1e-4).
Reports the expert load's coefficient of variation (std / mean over the experts of a layer, mean over the MoE
layers) at the end, on held-out batches of the same corpus that neither run trained on (routing only, no update),
for several seeds. The rate and alpha are the paper's, not tuned here.

The corpus: token ids drawn from a Zipf law (exponent 1.1) over the vocabulary, each sequence from one of 4
"topics" (a fixed random permutation of the ids), so a few ids and topics dominate and a router with nothing to
balance it sends most tokens to few experts.

    .venv/bin/python benchmarks/moe_balance.py [--steps 300] [--seeds 0 1 2] [--rate R] [--smoke] [--json out.json]

Figures in benchmarks/README.md ("MoE load balancing"). `--rate` sets the bias update rate of the run with it.

`--smoke` runs 6 steps and one seed (the test suite's check that the script runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.models import build_causal_lm  # noqa: E402
from trainer.models.moe import moe_layers, update_expert_bias  # noqa: E402

MODEL = "tiny-deepseek-v3"
BATCH, SEQ_LEN, TOPICS, ZIPF_EXPONENT = 16, 64, 4, 1.1
HELDOUT_BATCHES = 8


class SkewedCorpus:
    """Zipf-distributed token ids under one of a few topic permutations per sequence."""

    def __init__(self, vocab_size: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        ranks = torch.arange(1, vocab_size + 1, dtype=torch.float64)
        self.probs = ranks.pow(-ZIPF_EXPONENT) / ranks.pow(-ZIPF_EXPONENT).sum()
        self.topics = torch.stack([torch.randperm(vocab_size, generator=gen) for _ in range(TOPICS)])

    def batch(self, gen: torch.Generator) -> torch.Tensor:
        ranks = torch.multinomial(self.probs, BATCH * SEQ_LEN, replacement=True, generator=gen).view(BATCH, SEQ_LEN)
        topic = torch.randint(0, TOPICS, (BATCH,), generator=gen)
        return torch.gather(self.topics[topic], 1, ranks)


def load_cv(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    """The expert load's coefficient of variation over `batches`, mean over the MoE layers (no update)."""
    counts = {id(layer.gate): torch.zeros(layer.num_experts) for layer in moe_layers(model)}

    def count(router, _inputs, out) -> None:
        counts[id(router)] += torch.bincount(out[1].reshape(-1), minlength=len(counts[id(router)])).float()

    hooks = [layer.gate.register_forward_hook(count) for layer in moe_layers(model)]
    with torch.no_grad():
        for ids in batches:
            model(ids)
    for hook in hooks:
        hook.remove()
    cvs = [float(c.std(unbiased=False) / c.mean()) for c in counts.values()]
    return sum(cvs) / len(cvs)


def train(seed: int, steps: int, bias_update: bool, rate: float | None = None) -> dict:
    torch.manual_seed(seed)
    model = build_causal_lm(MODEL, seed=seed).train()
    layers = moe_layers(model)
    for layer in layers:
        layer.bias_update_rate = (rate or layer.bias_update_rate) if bias_update else 0.0
    corpus = SkewedCorpus(model.config.vocab_size, seed)
    heldout = [corpus.batch(torch.Generator().manual_seed(10_000 + seed * 100 + i)) for i in range(HELDOUT_BATCHES)]
    data = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3, weight_decay=0.01)
    start_cv = load_cv(model.eval(), heldout)
    model.train()
    loss = torch.zeros(())
    for _ in range(steps):
        ids = corpus.batch(data)
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        update_expert_bias(model)
        for layer in layers:
            layer.stats.reset()
    return {"seed": seed, "bias_update": bias_update, "start_cv": start_cv, "end_cv": load_cv(model.eval(), heldout),
            "final_loss": loss.item(), "bias_abs_max": max(float(layer.gate.e_score_correction_bias.abs().max())
                                                           for layer in layers)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rate", type=float, help="bias update rate (default: the card's, DeepSeek-V3's 1e-3)")
    parser.add_argument("--smoke", action="store_true", help="6 steps, one seed")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    steps, seeds = (6, [0]) if args.smoke else (args.steps, args.seeds)
    torch.set_num_threads(1)
    started = time.perf_counter()
    rows = [train(seed, steps, bias_update, args.rate) for seed in seeds for bias_update in (False, True)]
    print(f"{MODEL}, {steps} steps of {BATCH} x {SEQ_LEN} tokens, bias update rate {args.rate or 'of the card'}; "
          "held-out CV of the expert load (mean over layers)")
    print("| seed | CV at init | CV without bias update | CV with bias update | ratio | loss without / with |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for seed in seeds:
        without, with_update = (next(r for r in rows if r["seed"] == seed and r["bias_update"] is b)
                                for b in (False, True))
        ratio = with_update["end_cv"] / without["end_cv"]
        ratios.append(ratio)
        print(f"| {seed} | {without['start_cv']:.3f} | {without['end_cv']:.3f} | {with_update['end_cv']:.3f} | "
              f"{ratio:.2f} | {without['final_loss']:.3f} / {with_update['final_loss']:.3f} |")
    print(f"worst ratio {max(ratios):.2f} (target <= 0.5); {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"steps": steps, "rate": args.rate, "rows": rows, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
