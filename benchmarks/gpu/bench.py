"""Train a Llama-3.2-1B-shaped model with the bundled trainer on one GPU and report speed and memory.

The real recipe (`TrainFinetuneRecipe`) runs in this process: random init of the bundled
`llama32-1b` config (16 layers, hidden 2048, vocab 128256, tied embeddings), bf16 through FSDP2's
mixed-precision policy on a one-GPU mesh, `torch.compile` per block, the fused linear +
cross-entropy, fused AdamW, mock data at seq 4096. It prints tokens/s and MFU (the trainer's
6N + 6·L·d·S FLOPs per token over the dense peak of the GPU's hardware card), the peak memory, each
next to the planner's estimate of the same layout (engine bundled), and the time taken.

    python benchmarks/gpu/bench.py                      # on the GPU (run.sh sets it up)
    python benchmarks/gpu/bench.py --check-kernels      # fused kernels vs fallbacks (kernel_check.py)
    python benchmarks/gpu/bench.py --smoke              # the same code path: tiny model, CPU, 2 steps
    python benchmarks/gpu/bench.py --model qwen3-30b-a3b --layers 4 --name moe-bf16   # Qwen3-30B-A3B-shaped MoE

`--layers N` keeps the model's shape but its first N layers (a Qwen3-30B-A3B's 48 layers do not fit one GPU
with their fp32 AdamW states; 4 do: ~3.1B parameters, 128 experts of FFN 768 each, top-8). With --tiny (or
--smoke), an MoE model is stood in for by the bundled tiny-moe.

With --out-dir, the report goes to DIR/NAME.json after every step (so a run cut off still leaves
one) and the measurement, as a row of recipe_index/data/published_throughput.json, into
DIR/throughput_rows.json. --time-budget S ends the run early, after whole steps, so that it finishes
within S seconds of its start. Exit 0 with the report; 1 when a kernel check fails.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

STARTED = time.perf_counter()
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from throughput_row import add_row, planner_estimate, source_commit, throughput_row, write_json  # noqa: E402

# The tiny CPU stand-in: the same recipe path in seconds (tests/trainer/fused/test_gpu_benchmark_script.py).
TINY_MODEL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                  max_position_embeddings=4096)
SMOKE = dict(device="cpu", tiny=True, compile=False, steps=2, warmup=1, batch=2, seq=64)
GPU_NAMES = (("h200", "h200"), ("h100", "h100"), ("gh200", "gh200"), ("b200", "b200"), ("a100", "a100-80gb"))
# Seconds kept after the last step for the final report.
REPORT_RESERVE_S = 10.0
ROWS_FILE = "throughput_rows.json"


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
        "model": {"pretrained_model_name_or_path": model, "dtype": "float32", "kernels": args.kernels},
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


def environment(device: str) -> dict[str, Any]:
    """Versions and device facts that explain a figure."""
    import torch

    def version(dist: str) -> Optional[str]:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": version("triton"), "liger_kernel": version("liger-kernel"), "torchao": version("torchao"),
           "pydantic": version("pydantic")}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(device_memory_gib=round(props.total_memory / 2**30, 1),
                   compute_capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count)
    return env


class StepWatch:
    """Takes the place of the recipe's training.jsonl writer: keeps each step's record, prints progress,
    hands the records to `on_step` (the partial report), and ends the run after the current step when
    the next one might not finish before `deadline` (the step scheduler stops once its step reaches
    total_steps)."""

    def __init__(self, writer, recipe, deadline: Optional[float], on_step, tokens_per_step: int, warmup: int):
        self.writer, self.recipe, self.deadline, self.on_step = writer, recipe, deadline, on_step
        self.tokens_per_step, self.warmup = tokens_per_step, warmup
        self.rows: list[dict] = []
        self.stopped_by: Optional[str] = None
        self.after_step = lambda: None

    def start(self, resumed_step) -> None:
        self.writer.start(resumed_step)

    def write(self, record: dict) -> None:
        self.writer.write(record)
        self.rows.append(record)
        step_s = self.tokens_per_step / max(record["tps"], 1e-9)
        sched = self.recipe.step_scheduler
        timed = record["step"] - self.warmup
        if timed <= 0 or timed % 5 == 0 or sched.step == sched.total_steps:
            phase = "warm-up" if timed <= 0 else "timed"
            print(f"step {record['step']}/{sched.total_steps} ({phase}): {step_s:.3f} s, "
                  f"{record['tps']:,.0f} tokens/s, peak {record['mem']:.1f} GiB, loss {record['loss']:.3f}  "
                  f"[t={time.perf_counter() - STARTED:.0f} s]", flush=True)
        if self.deadline is not None and sched.step < sched.total_steps \
                and time.perf_counter() + 2 * step_s > self.deadline:
            self.stopped_by = f"time budget: stopped after step {sched.step} of {sched.total_steps}"
            print(self.stopped_by, flush=True)
            sched.total_steps = sched.step
        self.on_step(self.rows, self.stopped_by)
        self.after_step()

    def close(self) -> None:
        self.writer.close()


class StepProfile:
    """``--profile``: torch.profiler over the timed steps (the warm-up's compiles left out), summarised by
    profile_summary.kernel_groups into the report's ``profile``: seconds of GEMM, attention, element-wise,
    communication and idle over the profiled steps."""

    def __init__(self, enabled: bool, warmup: int, device_type: str):
        self.enabled, self.warmup, self.device_type = enabled, warmup, device_type
        self.groups: Optional[dict] = None
        self._steps = 0
        self._prof = None
        self._started: Optional[float] = None

    def __enter__(self):
        return self

    def step(self) -> None:
        if not self.enabled:
            return
        self._steps += 1
        if self._steps == self.warmup:
            import torch

            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device_type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
                torch.cuda.synchronize()
            self._prof = torch.profiler.profile(activities=activities)
            self._prof.__enter__()
            self._started = time.perf_counter()

    def __exit__(self, *exc) -> None:
        if self._prof is None:
            return
        import torch
        from profile_summary import kernel_groups

        if self.device_type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - self._started
        self._prof.__exit__(*exc)
        self.groups = kernel_groups(self._prof.key_averages(), wall) | {"steps": self._steps - self.warmup}


def summarise(context: dict, rows: list[dict], stopped_by: Optional[str], complete: bool) -> dict[str, Any]:
    """The report from the step records so far: the first `warmup` steps (compilation) are not timed; a
    run stopped inside its warm-up times what it has after the first step, and says so."""
    warmup = context["warmup_steps"]
    timed = rows[warmup:]
    if not timed and len(rows) > 1:
        timed = rows[1:]
        stopped_by = "; ".join(filter(None, [stopped_by, "warm-up cut short, timed the steps after the first"]))
    tokens_per_step = context["batch"] * context["seq"]
    seconds = [tokens_per_step / r["tps"] for r in timed]
    tps = tokens_per_step * len(timed) / sum(seconds) if timed else None
    peak = context["peak_flops"]
    flops = context["flops_per_token"]
    report = dict(context)
    del report["peak_flops"]
    report.update({
        "complete": complete and stopped_by is None, "stopped_by": stopped_by,
        "steps_run": len(rows), "steps_timed": len(timed),
        "step_seconds": [round(tokens_per_step / r["tps"], 5) for r in rows],
        "tokens_per_s": tps, "step_time_s": sum(seconds) / len(seconds) if timed else None,
        # The median step shows whether a slow outlier (a late recompile, a hiccup) moved the mean.
        "median_step_time_s": statistics.median(seconds) if timed else None,
        "model_tflops_per_gpu": flops * tps / 1e12 / context["num_gpus"] if tps else None,
        "mfu": flops * tps / (peak * context["num_gpus"]) if tps and peak else None,
        "peak_allocated_gib": rows[-1]["mem"] if rows else None,
        "final_loss": rows[-1]["loss"] if rows else None,
        "total_s": time.perf_counter() - STARTED,
    })
    estimate = context.get("planner")
    if estimate and tps:
        report["estimate_over_measured"] = {
            "tokens_per_s": estimate["tokens_per_s_per_gpu"] / (tps / context["num_gpus"]),
            "peak_memory": estimate["memory_gib"]["total"] / report["peak_allocated_gib"]
            if report["peak_allocated_gib"] else None}
    return report


def model_path(args, tmp: Path) -> str:
    """The model to train: the tiny stand-in (an MoE's: tiny-moe), or `--model` cut to `--layers` layers."""
    from trainer.models.builder import resolve_config
    from trainer.models.config import DecoderConfig

    if args.tiny:
        if resolve_config(args.model)[0].moe is not None:
            return "tiny-moe"
        folder = tmp / "tiny"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(DecoderConfig(**TINY_MODEL).to_hf()))
        return str(folder)
    if args.layers is None:
        return args.model
    config = resolve_config(args.model)[0].to_hf()
    if config.get("mlp_only_layers"):
        config["mlp_only_layers"] = [i for i in config["mlp_only_layers"] if i < args.layers]
    config["num_hidden_layers"] = args.layers
    folder = tmp / f"{args.model.replace('/', '_')}-{args.layers}-layers"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def run(args) -> dict:
    import torch

    from trainer.components.metrics import device_peak_flops
    from trainer.contract.config import parse_config
    from trainer.distributed.dist import init_distributed
    from trainer.fused.runtime import resolve_kernels
    from trainer.recipes.train_ft import TrainFinetuneRecipe

    deadline = STARTED + args.time_budget - REPORT_RESERVE_S if args.time_budget else None
    out_dir = args.out_dir
    with tempfile.TemporaryDirectory() as tmp:
        model = model_path(args, Path(tmp))
        cuda = args.device == "cuda"
        gpu_type = "cpu" if not cuda else args.gpu_type or detect_gpu_type(torch.cuda.get_device_name()) or "h100"
        raw = recipe_config(args, Path(tmp) / "out", model, gpu_type)
        info = init_distributed("gloo" if not cuda else "auto")
        recipe = TrainFinetuneRecipe(parse_config(raw), raw, info)
        print(f"setting up {'the tiny stand-in' if args.tiny else model} on {gpu_type} "
              f"[t={time.perf_counter() - STARTED:.0f} s]", flush=True)
        recipe.setup()
        config = recipe.model_config
        precision = "fp8" if args.fp8 else "bf16"
        context = {
            "name": args.name, "model": f"{model} (smoke)" if args.tiny else args.model,
            "layers_kept": args.layers, "moe": _moe_facts(config),
            "bundled_model": not args.tiny and args.layers is None, "gpu_type": gpu_type,
            "device": torch.cuda.get_device_name() if cuda else "cpu", "num_gpus": info.world_size,
            "params": config.num_parameters(), "layers": config.num_hidden_layers, "hidden": config.hidden_size,
            "seq": args.seq, "batch": args.batch, "recompute": args.recompute, "precision": precision,
            "compile": args.compile, "warmup_steps": args.warmup, "steps_planned": args.steps,
            "kernels": {"blocks": resolve_kernels(args.kernels, info.device.type, compile_enabled=args.compile),
                        "loss": getattr(recipe.model, "loss_kernels", None)},
            "flops_per_token": recipe.flops_per_token,
            "peak_flops": device_peak_flops(gpu_type, precision, info.device.type),
            "setup_s": time.perf_counter() - STARTED, "environment": environment(args.device),
            "commit": source_commit(REPO), "planner": _estimate(model, gpu_type, info.world_size, args, precision),
        }
        estimate, peak = context["planner"], context["peak_flops"]
        if estimate and peak:
            # The planner's MFU divides by its own FLOPs per token (for tied embeddings without the LM head
            # GEMM); its tokens/s at the trainer's count is the MFU to set beside the measured one.
            estimate["mfu_at_trainer_flops"] = estimate["tokens_per_s_per_gpu"] * recipe.flops_per_token / peak
        print(f"set up in {context['setup_s']:.0f} s; {args.warmup} warm-up + {args.steps} timed steps of "
              f"{args.batch} x {args.seq} tokens", flush=True)

        def on_step(rows, stopped_by):
            if out_dir is not None:
                write_json(out_dir / f"{args.name}.json", summarise(context, rows, stopped_by, complete=False))

        watch = StepWatch(recipe.train_log, recipe, deadline, on_step, args.batch * args.seq, args.warmup)
        recipe.train_log = watch
        with StepProfile(args.profile, args.warmup, info.device.type) as profile:
            watch.after_step = profile.step
            recipe.run_train_validation_loop()
    report = summarise(context, watch.rows, watch.stopped_by, complete=True)
    if profile.groups is not None:
        report["profile"] = profile.groups
    if cuda:
        report["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
        report["compile_stats"] = _compile_stats()
    if out_dir is not None:
        write_json(out_dir / f"{args.name}.json", report)
        if report["tokens_per_s"]:
            add_row(out_dir / ROWS_FILE, throughput_row(report))
    return report


def _moe_facts(config) -> Optional[dict]:
    moe = getattr(config, "moe", None)
    if moe is None:
        return None
    return {"experts": moe.num_experts, "top_k": moe.top_k, "expert_ffn": moe.expert_intermediate_size}


def _estimate(model: str, gpu_type: str, num_gpus: int, args, precision: str) -> Optional[dict]:
    """The planner's estimate of this run, or None (with the reason printed) where it cannot be made:
    the measurement matters more than the comparison."""
    try:
        return planner_estimate(model, gpu_type, num_gpus=num_gpus, seq_length=args.seq, global_batch_size=args.batch,
                                micro_batch_size=args.batch, recompute=args.recompute, precision=precision)
    except Exception as exc:
        print(f"planner estimate unavailable: {type(exc).__name__}: {exc}", flush=True)
        return None


def _compile_stats() -> dict:
    """Graphs dynamo compiled and graph breaks: a benchmark whose blocks fell back to eager says so here."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": sum(counters["graph_break"].values())}


def print_report(r: dict) -> None:
    est = r.get("planner") or {}
    print(f"device {r['device']} (card {r['gpu_type']}), {r['params'] / 1e9:.2f}B params, batch {r['batch']} x seq "
          f"{r['seq']}, {r['precision']}, {r['steps_timed']} timed steps"
          + (f" ({r['stopped_by']})" if r["stopped_by"] else ""))
    if r["tokens_per_s"] is None:
        print("tokens/s: n/a (no timed step)")
    else:
        vs = f"; planner estimate {est['tokens_per_s_per_gpu']:,.0f}" if est else ""
        print(f"tokens/s: {r['tokens_per_s']:,.0f} ({r['step_time_s']:.3f} s/step, median "
              f"{r['median_step_time_s']:.3f}{vs})")
    mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a (no dense peak for this device)"
    vs = f"; planner estimate {est['mfu_at_trainer_flops']:.1%}" if est.get("mfu_at_trainer_flops") else ""
    print(f"MFU ({r['precision']} dense peak): {mfu}{vs}")
    reserved = f", reserved {r['peak_reserved_gib']:.1f}" if r.get("peak_reserved_gib") is not None else ""
    allocated = f"{r['peak_allocated_gib']:.2f}" if r["peak_allocated_gib"] is not None else "n/a"
    line = f"peak memory GiB: allocated {allocated}{reserved}"
    if est:
        m = est["memory_gib"]
        line += (f"; planner estimate {m['total']:.2f} (weights {m['weights']}, grads {m['grads']}, optimizer "
                 f"{m['optimizer']}, activations {m['activations']}, other {m['other']})")
    print(line)
    print(f"time: setup {r['setup_s']:.0f} s, total {r['total_s']:.0f} s; final loss {r['final_loss']:.3f}")
    print("RESULT " + json.dumps(r))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer stand-in model (for CPU checks)")
    parser.add_argument("--smoke", action="store_true",
                        help="the whole path on CPU in seconds: --device cpu --tiny --no-compile, 1 + 2 steps")
    parser.add_argument("--model", default="llama32-1b", help="bundled model id (default llama32-1b)")
    parser.add_argument("--layers", type=int, help="keep only the model's first N layers (its shape otherwise)")
    parser.add_argument("--gpu-type", help="hardware card id (default: from the CUDA device name)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed first steps (compilation)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per step")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--kernels", choices=("auto", "torch", "liger"), default="auto",
                        help="model.kernels (auto: Liger where installed and the blocks are not compiled)")
    parser.add_argument("--fp8", action="store_true", help="precision fp8 (torchao float8 linears, sm89+)")
    parser.add_argument("--check-kernels", action="store_true", help="compare fused kernels with fallbacks, then exit")
    parser.add_argument("--out-dir", type=Path, help="write NAME.json and throughput_rows.json here")
    parser.add_argument("--name", default="dense-bf16", help="the report's file name under --out-dir")
    parser.add_argument("--time-budget", type=float, help="seconds from start; steps stop early to keep it")
    parser.add_argument("--profile", action="store_true",
                        help="torch.profiler over the timed steps: GEMM / attention / element-wise / comm / idle")
    args = parser.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    if args.check_kernels:
        from kernel_check import run as check

        return check(args.device, args.out_dir)
    print_report(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
