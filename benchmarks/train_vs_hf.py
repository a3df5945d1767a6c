"""The bundled trainer against a plain Hugging Face training loop: tokens/s and peak memory.

Both train the same Llama (default 4 layers, hidden 256, 8 heads / 4 KV, FFN 768, vocab 32000,
untied) on the same mock tokens (trainer.data.MockDataset), batch 8 x 512, fp32, AdamW
(lr 3e-4, betas 0.9/0.95, weight decay 0.01), gradient clipping at 1.0, for the same steps:

- ours: the real recipe, `TrainFinetuneRecipe` set up from a config and run through
  `run_train_validation_loop()` in-process, with its defaults: SDPA, fused RMSNorm/SwiGLU/RoPE
  autograd functions, fused linear + cross-entropy, fused AdamW. Tokens/s is read from its
  training.jsonl (one record per step).
- hf: `transformers.LlamaForCausalLM` (attn_implementation="sdpa", built from the same
  config.json) + `torch.optim.AdamW()` with its defaults, `model(input_ids, labels=labels).loss`
  backward, clip, step, zero_grad: the loop from the transformers docs.

Each run is a fresh subprocess (OMP/torch threads fixed), runs alternate (hf, ours, ours, hf,
...) so background load hits both alike, and the first `--warmup` steps of each run are not timed.

Peak memory: the process's resident-set high-water mark (getrusage ru_maxrss; tracemalloc does not
see torch's allocations and CPU torch keeps no allocator statistics). Both workers import torch
and transformers before anything is measured, so the import cost is equal; the table shows the
whole-process peak and the peak above the RSS after imports (what training itself added).

`--moe` trains an MoE of the tiny-moe family instead (Qwen3-MoE: the same attention, 8 experts of FFN 256,
top-2, norm_topk_prob, every layer sparse) against `transformers.Qwen3MoeForCausalLM` with
`output_router_logits` on, so both optimise cross-entropy + 0.001 x a load-balancing loss (transformers'
normalisation is top_k times ours for one layer: the same work, a different weight).

`--interleaved` runs both loops in each process, one step of each in turn, for a speed ratio that
load from other processes disturbs less (memory is then not measured).

Run: .venv/bin/python benchmarks/train_vs_hf.py [--rounds 3 --steps 4 --warmup 1 --threads 2] [--moe]
     .venv/bin/python benchmarks/train_vs_hf.py --micro   (AdamW variants, loss chunk sizes, the GEMM floor)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPE = dict(vocab_size=32000, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
OPTIM = dict(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
MOE = dict(model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
           mlp_only_layers=[], router_aux_loss_coef=0.001)


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def write_model_dir(folder: Path, layers: int, hidden: int, vocab: int, moe: bool = False) -> Path:
    from trainer.models.config import DecoderConfig

    shape = dict(SHAPE, model_type="llama", num_hidden_layers=layers, hidden_size=hidden, vocab_size=vocab,
                 intermediate_size=3 * hidden)
    if moe:  # experts of FFN `hidden` (tiny-moe: hidden 64, 8 experts of 32, top-2)
        shape.update(MOE, moe_intermediate_size=hidden)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(DecoderConfig.from_hf(shape).to_hf(), indent=1))
    return folder


def mock_dataset(args, vocab: int):
    from trainer.data import MockDataset

    return MockDataset(seq_length=args.seq, num_samples=args.batch * (args.steps + args.warmup),
                       vocab_size=vocab, seed=1234)


# ---- workers (one per subprocess) ---------------------------------------------------------------


def our_recipe(args, model_dir: Path, out_dir: Path, steps: int):
    """The bundled trainer's recipe for this benchmark, set up (model, optimizer, data, loss)."""
    from trainer.contract.config import parse_config
    from trainer.distributed.dist import init_distributed
    from trainer.recipes.train_ft import TrainFinetuneRecipe

    raw = {
        "model": {"pretrained_model_name_or_path": str(model_dir),
                  **({"kernels": args.kernels} if args.kernels else {})},
        "step_scheduler": {"global_batch_size": args.batch, "local_batch_size": args.batch, "max_steps": steps,
                           "log_interval": 1},
        "distributed": {"strategy": "fsdp2"},
        "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": args.seq,
                    "num_samples": args.batch * steps, "seed": 1234},
        "dataloader": {"shuffle": False},
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": OPTIM["lr"], "betas": list(OPTIM["betas"]),
                      "weight_decay": OPTIM["weight_decay"]},
        "lr_scheduler": {"schedule": "constant"},
        "loss_fn": {k: v for k, v in (("chunked", args.chunked), ("chunk_size", args.chunk_size)) if v is not None},
        "clip_grad_norm": {"max_norm": 1.0},
        "compile": {"enabled": args.compile},
        "checkpoint": {"enabled": False, "checkpoint_dir": str(out_dir)},
        "precision": "fp32",
        "hardware": {"gpu_type": "cpu", "gpus_per_node": 1},
    }
    # As `python -m trainer CONFIG` runs it: a one-process group, so FSDP2 on a one-rank mesh.
    recipe = TrainFinetuneRecipe(parse_config(raw), raw, init_distributed("auto"))
    recipe.setup()
    return recipe


def run_ours(args, model_dir: Path, out_dir: Path) -> dict:
    recipe = our_recipe(args, model_dir, out_dir, args.steps + args.warmup)
    # Time the loop's optimizer step (forward, backward, clip, step) as the reference loop is timed.
    timings: list[tuple[float, float]] = []
    step_fn = recipe._run_train_optim_step

    profile: dict = {}

    def timed_step(micro_batches):
        with profiled(args, len(timings), profile):
            wall, cpu = time.perf_counter(), time.process_time()
            out = step_fn(micro_batches)
            timings.append((time.perf_counter() - wall, time.process_time() - cpu))
        return out

    recipe._run_train_optim_step = timed_step
    recipe.run_train_validation_loop()
    rows = [json.loads(line) for line in (out_dir / "training.jsonl").read_text().splitlines()]
    return dict(summarize(args, timings, [r["loss"] for r in rows]), profile=profile)


def summarize(args, timings: list[tuple[float, float]], losses: list[float]) -> dict:
    timed = timings[args.warmup:]
    tokens = args.batch * args.seq * len(timed)
    # The fastest step is the least disturbed by other processes on a shared machine (as timeit's min).
    return {"tokens_per_s": tokens / sum(t[0] for t in timed), "tokens_per_s_best": args.batch * args.seq
            / min(t[0] for t in timed), "tokens_per_cpu_s": tokens / sum(t[1] for t in timed), "losses": losses}


def hf_loop(args, model_dir: Path):
    """The reference loop: returns (inputs of step i, one optimizer step on those inputs -> loss)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(1234)
    config = AutoConfig.from_pretrained(str(model_dir))  # LlamaConfig, or Qwen3MoeConfig with --moe
    if args.moe:
        config.output_router_logits = True  # the load-balancing loss joins the loss, as ours does
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", torch_dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), **OPTIM)
    data = mock_dataset(args, config.vocab_size)

    def inputs(step: int):
        batch = [data[i] for i in range(step * args.batch, (step + 1) * args.batch)]
        return torch.stack([b["input_ids"] for b in batch]), torch.stack([b["labels"] for b in batch])

    def step_fn(input_ids, labels) -> float:
        # MockDataset labels are already shifted; transformers shifts again, so pass unshifted targets
        # aligned its way: labels[t] is compared with logits[t-1].
        hf_labels = torch.cat([torch.full_like(labels[:, :1], -100), labels[:, :-1]], dim=1)
        loss = model(input_ids=input_ids, labels=hf_labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return inputs, step_fn


def run_hf(args, model_dir: Path) -> dict:
    inputs, step_fn = hf_loop(args, model_dir)
    losses, timings, profile = [], [], {}
    for step in range(args.steps + args.warmup):
        batch = inputs(step)
        with profiled(args, step, profile):
            wall, cpu = time.perf_counter(), time.process_time()
            losses.append(step_fn(*batch))
            timings.append((time.perf_counter() - wall, time.process_time() - cpu))
    return dict(summarize(args, timings, losses), profile=profile)


def run_interleaved(args, model_dir: Path, out_dir: Path) -> dict:
    """Both loops in one process, one optimizer step of each in turn (hf, ours, ours, hf, ...), so a
    burst of load from other processes hits both alike: the steadier ratio on a shared machine."""
    steps = args.steps + args.warmup
    recipe = our_recipe(args, model_dir, out_dir, steps)
    our_inputs = (micro for _ in recipe.step_scheduler.epochs for micro in recipe.step_scheduler)
    hf_inputs, hf_step = hf_loop(args, model_dir)
    run = {"hf": lambda step: hf_step(*hf_inputs(step)),
           "ours": lambda step: recipe._run_train_optim_step(next(our_inputs))[0]}
    timings: dict[str, list[tuple[float, float]]] = {"hf": [], "ours": []}
    losses: dict[str, list[float]] = {"hf": [], "ours": []}
    recipe.model.train()
    for step in range(steps):
        for kind in (("hf", "ours") if step % 2 == 0 else ("ours", "hf")):
            wall, cpu = time.perf_counter(), time.process_time()
            losses[kind].append(run[kind](step))
            timings[kind].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {kind: summarize(args, timings[kind], losses[kind]) for kind in timings}


# Self CPU time of the profiled step by kind of work (--profile). Op names as torch.profiler reports them.
PROFILE_GROUPS = (
    ("fp32 GEMMs", ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::addbmm")),
    ("attention (SDPA)", ("scaled_dot_product", "flash_attention")),
    ("log-softmax / cross-entropy", ("log_softmax", "nll_loss", "cross_entropy")),
)


def profile_groups(events) -> dict[str, float]:
    """Seconds of self CPU time per PROFILE_GROUPS entry, the rest as "everything else"."""
    out = {name: 0.0 for name, _ in PROFILE_GROUPS}
    out["everything else"] = 0.0
    for event in events:
        seconds = event.self_cpu_time_total / 1e6
        group = next((name for name, keys in PROFILE_GROUPS
                      if event.key in keys or any(k in event.key for k in keys if not k.startswith("aten::"))),
                     "everything else")
        out[group] += seconds
    return out


class profiled:
    """Profile the last untimed warm-up step when --profile is given; fill `into` with the groups."""

    def __init__(self, args, step: int, into: dict) -> None:
        self.active = args.profile and step == args.warmup - 1
        self.into, self.prof = into, None

    def __enter__(self):
        if self.active:
            import torch

            self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            self.prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.prof is not None:
            self.prof.__exit__(*exc)
            self.into.update(profile_groups(self.prof.key_averages()))


def worker(args) -> None:
    import torch
    import transformers  # noqa: F401  (imported by both workers, so both baselines hold it)

    torch.set_num_threads(args.threads)
    import trainer.recipes.train_ft  # noqa: F401

    baseline = rss_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model_dir(Path(tmp) / "model", args.layers, args.hidden, args.vocab, args.moe)
        if args.worker == "both":
            result = run_interleaved(args, model_dir, Path(tmp) / "out")
        elif args.worker == "ours":
            result = run_ours(args, model_dir, Path(tmp) / "out")
        else:
            result = run_hf(args, model_dir)
    result.update(peak_rss=peak_rss_bytes(), baseline_rss=baseline)
    print("RESULT " + json.dumps(result))


# ---- micro-benchmarks of single fast paths (--micro) ----------------------------------------------


def _best_of(fn, repeat: int) -> float:
    fn()  # warm-up: first-touch allocations
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def micro(args) -> None:
    """AdamW step variants over this model's parameters, and the LM head + loss at several chunk sizes."""
    import torch
    import torch.nn.functional as F

    from trainer.fused.linear_cross_entropy import linear_cross_entropy
    from trainer.models.config import DecoderConfig

    torch.set_num_threads(args.threads)
    config = DecoderConfig(**dict(SHAPE, num_hidden_layers=args.layers, hidden_size=args.hidden,
                                  vocab_size=args.vocab, intermediate_size=3 * args.hidden))
    sizes = [config.vocab_size * config.hidden_size] * 2 + [config.num_parameters() - 2 * config.vocab_size
                                                          * config.hidden_size]
    for name, kwargs in (("for-loop (CPU default)", dict(foreach=False)), ("foreach", dict(foreach=True)),
                         ("fused", dict(fused=True))):
        params = [torch.nn.Parameter(torch.randn(n)) for n in sizes]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-3, **kwargs)
        print(f"AdamW {name}: {_best_of(opt.step, 5) * 1e3:.0f} ms per step ({sum(sizes) / 1e6:.1f}M params)")
    tokens = args.batch * args.seq
    hidden = torch.randn(tokens, config.hidden_size, requires_grad=True)
    weight = (torch.randn(config.vocab_size, config.hidden_size) * 0.02).requires_grad_()
    labels = torch.randint(0, config.vocab_size, (tokens,))

    def plain():
        F.cross_entropy((hidden @ weight.t()).float(), labels, reduction="sum").backward()

    def gemm_floor():  # the three [tokens, vocab] GEMMs of forward and backward with nothing between them
        with torch.no_grad():
            logits = hidden @ weight.t()
            logits @ weight, logits.t() @ hidden

    plain_seconds, floor = _best_of(plain, 3), _best_of(gemm_floor, 3)
    print(f"LM head + loss, plain: {plain_seconds:.2f} s; its three GEMMs alone (the floor): {floor:.2f} s "
          f"({plain_seconds / floor:.2f}x plain's speed)")
    meta_build_times()
    for rows in (64, 128, 256, 512, 1024, 2048):
        seconds = _best_of(lambda: linear_cross_entropy(hidden, weight, labels, chunk_size=rows).backward(), 3)
        print(f"LM head + loss, fused, {rows} rows per chunk: {seconds:.2f} s ({plain_seconds / seconds:.2f}x plain's "
              "speed)")


_META_BUILD = """
import sys, time, torch
from contextlib import nullcontext
from trainer.models.builder import resolve_config, skip_init
from trainer.models.decoder import CausalLM
config, _ = resolve_config("tiny-llama")
start = time.perf_counter()
with torch.device("meta"), (skip_init() if sys.argv[1] == "skip" else nullcontext()):
    CausalLM(config)
print(time.perf_counter() - start, "torch._dynamo" in sys.modules)
"""


def meta_build_times(repeat: int = 3) -> None:
    """Building tiny-llama on the meta device in a fresh process, with the constructors' nn.init
    (the old path) and with skip_init (build_causal_lm's)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    for mode in ("init", "skip"):
        runs = [subprocess.run([sys.executable, "-c", _META_BUILD, mode], env=env, capture_output=True, text=True,
                               timeout=300).stdout.split() for _ in range(repeat)]
        times = ", ".join(f"{float(r[0]):.2f}" for r in runs)
        print(f"meta-device build, {'skip_init' if mode == 'skip' else 'nn.init on meta'}: {times} s "
              f"(torch._dynamo imported: {runs[0][1]})")


# ---- driver -------------------------------------------------------------------------------------


def launch(kind: str, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind] + forwarded_args(args)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{kind} run failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def forwarded_args(args) -> list[str]:
    out = []
    for name in ("steps", "warmup", "threads", "batch", "seq", "layers", "hidden", "vocab", "chunk_size",
                 "chunked", "kernels"):
        value = getattr(args, name)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    flags = [f"--{flag}" for flag in ("compile", "profile", "moe") if getattr(args, flag)]
    return out + flags


def print_profile(runs: dict[str, list[dict]]) -> None:
    """Median seconds per group of the profiled step, and each group's share of that step."""
    print("\n| profiled step, self CPU time (median of runs) | reference | ours |")
    print("|---|---|---|")
    groups = [name for name, _ in PROFILE_GROUPS] + ["everything else"]
    medians = {kind: {g: statistics.median(r["profile"][g] for r in runs[kind]) for g in groups} for kind in runs}
    totals = {kind: sum(medians[kind].values()) for kind in runs}
    for group in groups:
        cells = [f"{medians[k][group]:.2f} s ({medians[k][group] / totals[k]:.0%})" for k in ("hf", "ours")]
        print(f"| {group} | " + " | ".join(cells) + " |")
    print(f"| step | {totals['hf']:.2f} s | {totals['ours']:.2f} s |")
    gemm = [name for name, _ in PROFILE_GROUPS][:2]
    bound = totals["hf"] / sum(medians["ours"][g] for g in gemm)
    print(f"bound if all but GEMMs and attention were free: {bound:.2f}x")


def interleaved(args) -> None:
    """--interleaved: `rounds` fresh processes, each alternating steps of both loops; the ratio of
    each process's tokens/s, then their median."""
    ratios = {"tokens_per_s": [], "tokens_per_s_best": [], "tokens_per_cpu_s": []}
    for i in range(args.rounds):
        result = launch("both", args)
        for key in ratios:
            ratios[key].append(result["ours"][key] / result["hf"][key])
        print(f"round {i + 1}: hf {result['hf']['tokens_per_s']:.0f} tokens/s ({result['hf']['tokens_per_cpu_s']:.0f} "
              f"per CPU-second), ours {result['ours']['tokens_per_s']:.0f} ({result['ours']['tokens_per_cpu_s']:.0f}); "
              f"ratio {ratios['tokens_per_s'][-1]:.2f}x", flush=True)
    print(f"\n{'MoE, ' if args.moe else ''}{args.layers} layers, hidden {args.hidden}, vocab {args.vocab}, batch "
          f"{args.batch} x seq {args.seq}, fp32, {args.threads} threads, steps alternating in one process, "
          f"{args.steps} timed steps of each after {args.warmup}, {args.rounds} processes")
    print("| ratio ours / reference (interleaved) | tokens/s | tokens/s, best step | tokens per CPU-second |")
    print("|---|---|---|---|")
    cells = " | ".join(f"{statistics.median(ratios[k]):.2f}x (runs {min(ratios[k]):.2f}-{max(ratios[k]):.2f})"
                       for k in ratios)
    print(f"| median of processes | {cells} |")


def mib(n: float) -> str:
    return f"{n / 2**20:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--chunk-size", type=int, default=None, help="ours: loss_fn.chunk_size (default: auto)")
    parser.add_argument("--chunked", default=None, help="ours: loss_fn.chunked (default: auto)")
    parser.add_argument("--kernels", default=None, help="ours: model.kernels (default: auto)")
    parser.add_argument("--compile", action="store_true", help="ours: compile.enabled")
    parser.add_argument("--moe", action="store_true", help="a Qwen3-MoE (8 experts, top-2) against Qwen3MoeForCausalLM")
    parser.add_argument("--worker", choices=("ours", "hf", "both"), help=argparse.SUPPRESS)
    parser.add_argument("--interleaved", action="store_true",
                        help="speed only: both loops in each process, steps alternating (steadier under load)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--micro", action="store_true", help="AdamW variants and loss chunk sizes only")
    parser.add_argument("--profile", action="store_true",
                        help="also profile the last warm-up step of each run (GEMM share etc.; needs --warmup 2+)")
    parser.add_argument("--smoke", action="store_true",
                        help="one round of one step of a 1-layer model: the code path in seconds (the suite runs it)")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.steps, args.warmup, args.layers, args.hidden, args.vocab = 1, 1, 0, 1, 64, 512
        args.batch, args.seq, args.threads = 2, 32, 1
    if args.micro:
        micro(args)
        return
    if args.profile and args.warmup < 2:
        parser.error("--profile profiles the last warm-up step, after the first (which pays one-off costs): "
                     "use --warmup 2 or more")
    if args.chunked in ("true", "false"):
        args.chunked = args.chunked == "true"
    if args.worker:
        worker(args)
        return

    if args.interleaved:
        interleaved(args)
        return
    runs: dict[str, list[dict]] = {"hf": [], "ours": []}
    for i in range(args.rounds):
        for kind in (("hf", "ours") if i % 2 == 0 else ("ours", "hf")):
            result = launch(kind, args)
            runs[kind].append(result)
            print(f"round {i + 1} {kind}: {result['tokens_per_s']:.0f} tokens/s, best step "
                  f"{result['tokens_per_s_best']:.0f} ({result['tokens_per_cpu_s']:.0f} per CPU-second), "
                  f"peak RSS {mib(result['peak_rss'])} MiB "
                  f"(+{mib(result['peak_rss'] - result['baseline_rss'])} over imports)", flush=True)

    def median(kind: str, key) -> float:
        return statistics.median(key(r) for r in runs[kind])

    rows = {kind: (median(kind, lambda r: r["tokens_per_s"]), median(kind, lambda r: r["tokens_per_s_best"]),
                   median(kind, lambda r: r["tokens_per_cpu_s"]), median(kind, lambda r: r["peak_rss"]),
                   median(kind, lambda r: r["peak_rss"] - r["baseline_rss"]))
            for kind in runs}
    (hf_tps, hf_best, hf_cpu, hf_peak, hf_train) = rows["hf"]
    (our_tps, our_best, our_cpu, our_peak, our_train) = rows["ours"]
    print(f"\n{'MoE, ' if args.moe else ''}{args.layers} layers, hidden {args.hidden}, vocab {args.vocab}, batch "
          f"{args.batch} x seq {args.seq}, fp32, {args.threads} threads, {args.steps} timed steps after {args.warmup}, "
          f"median of {args.rounds} runs each")
    print("| loop | tokens/s | tokens/s, best step | tokens per CPU-second | peak RSS (MiB) | "
          "peak RSS above imports (MiB) |")
    print("|---|---|---|---|---|---|")
    reference = "Qwen3MoeForCausalLM" if args.moe else "LlamaForCausalLM"
    print(f"| transformers {reference} + AdamW (reference) | {hf_tps:.0f} | {hf_best:.0f} | {hf_cpu:.0f} | "
          f"{mib(hf_peak)} | {mib(hf_train)} |")
    print(f"| bundled trainer (TrainFinetuneRecipe) | {our_tps:.0f} | {our_best:.0f} | {our_cpu:.0f} | "
          f"{mib(our_peak)} | {mib(our_train)} |")
    print(f"| ratio ours / reference | {our_tps / hf_tps:.2f}x | {our_best / hf_best:.2f}x | {our_cpu / hf_cpu:.2f}x | "
          f"{our_peak / hf_peak:.2f}x | {our_train / hf_train:.2f}x |")
    if args.profile:
        print_profile(runs)
    first = {k: [round(x, 3) for x in runs[k][0]["losses"]] for k in runs}
    print(f"first-run losses: hf {first['hf']}, ours {first['ours']}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
