"""Does `tune` find the best layout, with at most a third of the grid's trials? And what does a trial cost?

For each request (tiny-llama; tiny-moe; tiny-llama-long at 8K tokens), on 2 CPU processes (gloo):

1. the grid: every candidate tune would consider (each layout the planner lists as fitting, plus the recompute,
   strategy and micro batch variants) is measured ``--repeats`` times, the repeats interleaved (round robin over
   the layouts, so a slow minute of the shared machine hits every layout alike); a layout's figure is the median
   of its repeats, the noise floor the median over layouts of (max - min) / median of its repeats;
2. tune: ``Tuner`` with ``trials = len(grid) // 3`` and its early stop, on a fresh store;
3. the verdict: the grid's figure of tune's pick over the grid's best, against ``1 - noise floor`` and 0.97.

Overhead: launch to the first timed step (process start, imports, rendezvous, model build, warm-up steps) per
trial, beside the timed steps' time.

    .venv/bin/python benchmarks/tune_finds_best.py [--requests tiny-llama,tiny-moe,tiny-llama-long]
        [--grid-limit N] [--repeats 3] [--steps 20] [--warmup 3] [--json OUT]
    .venv/bin/python benchmarks/tune_finds_best.py --smoke     # a fake trainer: checks the script, seconds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.recommend.layout_source import choose_layout  # noqa: E402
from service.recommend.recommendation import prepare  # noqa: E402
from service.request import advice_request  # noqa: E402
from service.runs.bundled import read_metrics  # noqa: E402
from service.runs.errors import RunInputError  # noqa: E402
from service.tune.candidates import Candidates, select_candidates  # noqa: E402
from service.tune.runner import TrialSpec, run_trial  # noqa: E402
from service.tune.search import RECORD_ENV, TuneOptions, Tuner, timed_steps  # noqa: E402
from service.tune.trials import candidate_config, dump, trial_config  # noqa: E402

# tiny-llama-long at 8K takes 2 sequences a step (one per process): at the default 16, a step is ~40 s of these
# 2 cores (attention grows with the square of the sequence) and the grid 3 h; at 2, a trial is under a minute.
REQUESTS = {"tiny-llama": {}, "tiny-moe": {}, "tiny-llama-long": {"seq_length": 8192, "global_batch_size": 2}}


def request_candidates(model: str, fields: dict):
    prepared = prepare(advice_request(model, 2, "cpu", goal="pretrain", engine="bundled", **fields), read_runs=False)
    first, source = choose_layout(prepared.result, prepared.recipe, prepared.given)
    return prepared, select_candidates(prepared.result, first, source.summary, compiled=False)


def measure(prepared, candidate, folder: Path, steps: int, warmup: int, runner: Callable, timeout_s: float) -> dict:
    """One trial of one layout: tokens/s/GPU after the warm-up, launch to first timed step, timed time."""
    cfg = candidate_config(prepared, candidate)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trial.yaml").write_text(dump(trial_config(cfg.config, steps=steps, warmup=warmup), []))
    spec = TrialSpec(config=folder / "trial.yaml", folder=folder, nproc_per_node=2, timeout_s=timeout_s,
                     env=dict(RECORD_ENV), warmup=warmup)
    run = runner(spec)
    req = prepared.request
    tokens = req.global_batch_size * req.seq_length
    try:
        records = read_metrics(spec.metrics_path, drop_torn_tail=True)
    except RunInputError:
        records = []
    m = timed_steps(records, warmup, tokens)
    speed = tokens / m["step_time_s"] / req.world_size if m.get("step_time_s") else None
    return {"tokens_per_s_per_gpu": speed, "launch_to_first_timed_step_s": run.first_timed_step_s,
            "timed_s": m["step_time_s"] * m["timed_steps"] if speed else None, "wall_s": run.wall_s}


def grid(prepared, candidates: Candidates, limit: Optional[int], repeats: int, steps: int, warmup: int,
         runner: Callable, work: Path, timeout_s: float) -> dict:
    layouts = candidates.trials[:limit] if limit else candidates.trials
    runs: dict[str, list[dict]] = {c.label: [] for c in layouts}
    for repeat in range(repeats):  # interleaved: every layout once per round
        for i, candidate in enumerate(layouts):
            runs[candidate.label].append(measure(prepared, candidate, work / f"grid-r{repeat}-{i:02d}", steps,
                                                 warmup, runner, timeout_s))
            print(f"  grid round {repeat + 1}/{repeats} {candidate.label}: "
                  f"{runs[candidate.label][-1]['tokens_per_s_per_gpu'] or 0:,.0f}", file=sys.stderr, flush=True)
    rows = {}
    for label, trials in runs.items():
        speeds = [t["tokens_per_s_per_gpu"] for t in trials if t["tokens_per_s_per_gpu"]]
        mid = statistics.median(speeds) if speeds else None
        rows[label] = {"median": mid, "spread": (max(speeds) - min(speeds)) / mid if mid and len(speeds) > 1 else 0.0,
                       "trials": trials}
    return rows


def verdict(rows: dict, pick: Optional[str]) -> dict:
    measured = {label: row for label, row in rows.items() if row["median"]}
    best_label = max(measured, key=lambda label: measured[label]["median"])
    best = measured[best_label]["median"]
    noise = statistics.median(row["spread"] for row in measured.values())
    got = measured.get(pick, {}).get("median") if pick else None
    ratio = got / best if got else None
    return {"grid_best": best_label, "grid_best_tokens_per_s_per_gpu": round(best, 1), "noise_floor": round(noise, 3),
            "tune_pick": pick, "pick_over_best": None if ratio is None else round(ratio, 3),
            "within": bool(ratio is not None and (ratio >= 1 - noise or ratio >= 0.97))}


def overhead(rows: dict) -> dict:
    trials = [t for row in rows.values() for t in row["trials"] if t["launch_to_first_timed_step_s"]]
    if not trials:
        return {}
    return {"launch_to_first_timed_step_s": round(statistics.median(t["launch_to_first_timed_step_s"]
                                                                     for t in trials), 2),
            "timed_steps_s": round(statistics.median(t["timed_s"] for t in trials if t["timed_s"]), 2),
            "trials": len(trials)}


def bench_request(model: str, fields: dict, args, runner: Callable, work: Path) -> dict:
    prepared, candidates = request_candidates(model, fields)
    print(f"{model}: grid of {len(candidates.trials[:args.grid_limit] if args.grid_limit else candidates.trials)}",
          file=sys.stderr, flush=True)
    if args.reuse_grid:  # the grid measured before (a --json output): run only the tune against it
        done = next(r for r in json.loads(Path(args.reuse_grid).read_text()) if r["model"] == model)
        rows = {label: {**row, "trials": []} for label, row in done["grid"].items()}
    else:
        rows = grid(prepared, candidates, args.grid_limit, args.repeats, args.steps, args.warmup, runner,
                    work / model, args.trial_timeout)
    size = len(rows)
    options = TuneOptions(trials=max(size // 3, 1), steps=args.steps, warmup=args.warmup,
                          trial_timeout_s=args.trial_timeout, workdir=work / model / "tune")
    limited = Candidates(candidates.trials[:size], candidates.skipped)
    result = Tuner(prepared, limited, options, runner=runner).run()
    pick = result.best.candidate.label if result.best else None
    return {"model": model, "seq_length": prepared.request.seq_length,
            "tune_order": [r.candidate.label for r in result.results], "grid_trials": size * args.repeats,
            "grid_layouts": size, "tune_trials": len(result.results), "tune_stop": result.stop_reason,
            **verdict(rows, pick), "overhead": overhead(rows),
            "grid": {label: {"median": row["median"] and round(row["median"], 1), "spread": round(row["spread"], 3)}
                     for label, row in rows.items()}}


def fake_runner(spec: TrialSpec):
    """--smoke: the trainer's metrics at a speed that depends on the layout, written at once."""
    import yaml

    from service.tune.runner import TrialRun

    config = yaml.safe_load(spec.config.read_text())
    speed = 1000.0 * config["distributed"].get("tp_size", 1) + config["step_scheduler"]["local_batch_size"]
    steps = config["step_scheduler"]["max_steps"]
    spec.metrics_path.write_text("".join(json.dumps({"step": i, "loss": 5.0, "tps": speed, "mem": 0.1}) + "\n"
                                         for i in range(1, steps + 1)))
    return TrialRun(exit_code=0, timed_out=False, log="", wall_s=0.1, first_step_s=0.05, command=["fake"],
                    first_timed_step_s=0.06)


def main(argv: Optional[list[str]] = None, runner: Callable = run_trial) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", default=",".join(REQUESTS))
    parser.add_argument("--grid-limit", type=int, help="measure only the first N candidates of each grid")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--trial-timeout", type=float, default=600.0)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--reuse-grid", help="a --json output of an earlier run: reuse its grid, run only the tune")
    parser.add_argument("--smoke", action="store_true", help="a fake trainer, tiny-llama, a grid of 6: seconds")
    args = parser.parse_args(argv)
    if args.smoke:
        runner, args.requests, args.grid_limit, args.repeats, args.steps = fake_runner, "tiny-llama", 6, 2, 4
    out = []
    with tempfile.TemporaryDirectory(prefix="tune-bench-") as tmp:
        for model in args.requests.split(","):
            row = bench_request(model, REQUESTS[model], args, runner, Path(tmp))
            out.append(row)
            ov = row["overhead"]
            print(f"{model} (seq {row['seq_length']}): grid {row['grid_layouts']} layouts x {args.repeats} = "
                  f"{row['grid_trials']} trials, noise floor {row['noise_floor']:.1%}; grid best {row['grid_best']} "
                  f"{row['grid_best_tokens_per_s_per_gpu']:,.0f} tok/s/GPU; tune: {row['tune_trials']} trials, "
                  f"pick {row['tune_pick']} = {row['pick_over_best']} of the best "
                  f"({'within' if row['within'] else 'NOT within'} the noise floor or 97 %); launch to first timed "
                  f"step {ov.get('launch_to_first_timed_step_s')} s vs {ov.get('timed_steps_s')} s of timed steps")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
