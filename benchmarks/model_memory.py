"""Memory and time of the trainer's memory savers, each against its plain reference, on CPU.

1. Loss: `causal_lm_loss(chunked=True)` against the plain loss (full [tokens, vocab] logits).
2. Activation checkpointing: "selective" and "full" against "none".

Memory is the peak of bytes allocated by tensor ops during one forward + backward, beyond what
existed before the step (parameters): activations, logits, gradients. It is counted exactly with a
TorchDispatchMode that follows every op's output storage until it is freed (CPU has no allocator
statistics). Time is the median of `--repeat` steps after one warm-up, measured without the
counter. Ratios are variant / reference from the same run of this script.

Run: .venv/bin/python benchmarks/model_memory.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.distributed.parallelize import parallelize_model  # noqa: E402
from trainer.loss import causal_lm_loss  # noqa: E402
from trainer.models import CausalLM, init_weights  # noqa: E402
from trainer.models.presets import tiny_config  # noqa: E402

SHAPE = dict(vocab_size=32000, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, head_dim=32)
BATCH, SEQ, CHUNK = 4, 512, 256
VARIANTS = {
    "loss plain (reference)": dict(chunked=False, ac="none"),
    f"loss chunked ({CHUNK} tokens)": dict(chunked=True, ac="none"),
    "AC none (reference, chunked loss)": dict(chunked=True, ac="none"),
    "AC selective": dict(chunked=True, ac="selective"),
    "AC full": dict(chunked=True, ac="full"),
}


class PeakAllocated(TorchDispatchMode):
    """Live bytes of storages created by ops inside the mode, and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._tracked: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        self._tracked.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in self._tracked:
                continue
            self._tracked.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, key, nbytes)
        return out


def measure(chunked: bool, ac: str, repeat: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = CausalLM(tiny_config("llama", **SHAPE))
    init_weights(model, seed=0)
    model = parallelize_model(model, None, activation_checkpointing=ac)
    ids = torch.randint(0, SHAPE["vocab_size"], (BATCH, SEQ))
    labels = torch.roll(ids, -1, dims=1)

    def step() -> None:
        loss_sum, count = causal_lm_loss(model, ids, labels, chunked=chunked, chunk_size=CHUNK)
        (loss_sum / count).backward()

    times = []
    for _ in range(repeat + 1):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    with PeakAllocated() as counter:
        step()
    return statistics.median(times[1:]), counter.peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path in seconds (the suite runs it): 1 layer, vocab 512, seq 64")
    args = parser.parse_args()
    if args.smoke:
        global SEQ
        args.repeat, SEQ = 1, 64
        SHAPE.update(num_hidden_layers=1, vocab_size=512)
    results = {name: measure(v["chunked"], v["ac"], args.repeat) for name, v in VARIANTS.items()}
    print(f"{SHAPE}, batch {BATCH} x seq {SEQ}, fp32, CPU, {torch.get_num_threads()} threads")
    print("| variant | step time (s) | time ratio | peak allocated in step (MiB) | memory ratio |")
    print("|---|---|---|---|---|")
    for name, (seconds, mib) in results.items():
        reference = "loss plain (reference)" if name.startswith("loss") else "AC none (reference, chunked loss)"
        ref_s, ref_mib = results[reference]
        print(f"| {name} | {seconds:.2f} | {seconds / ref_s:.2f} | {mib:.0f} | {mib / ref_mib:.2f} |")


if __name__ == "__main__":
    main()
