"""The runs store's calibration on this machine: distinct layouts of the bundled trainer on 2 CPU processes
(gloo), each run REPEATS times interleaved (layout 1..N, then again), every run through `recipe-advisor train`,
which records it in a runs store of its own. Then, on what the store holds:

- the noise floor: the median spread of a layout's repeats ((max - min) / median step time);
- per calibration group (dense, MoE): the leave-one-layout-out median absolute error of the calibrated step
  time beside the uncalibrated estimate's, and the pair-order agreement on the pairs of layouts of one request
  whose measurements differ by more than twice the noise floor (service/runs/calibration.py).

Targets (the runs issue): calibrated LOO median error <= 10 %, pair order >= 85 %.

    .venv/bin/python benchmarks/runs_cpu_calibration.py [--repeats 3] [--steps 8] [--layouts 24] [--db FILE]
    .venv/bin/python benchmarks/runs_cpu_calibration.py --analyse-only --db FILE   # a store measured before
    .venv/bin/python benchmarks/runs_cpu_calibration.py --smoke                    # 1 layout, 1 run (the suite)

The layouts are fixed here, chosen to cover DP, TP, PP, CP, EP, micro batch, recompute and FSDP2 against DDP on
tiny-llama, tiny-moe and tiny-llama-long; one the trainer refuses (`train --dry-run`) is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECIPES = REPO / "recipe_index" / "recipes" / "bundled"
# (model, recipe, seq, global batch, tp, pp, cp, ep, micro batch, strategy, recompute)
LAYOUTS = [
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 1, "fsdp2", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 2, "fsdp2", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 4, "fsdp2", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 8, "fsdp2", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 1, "ddp", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 4, "ddp", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 8, "ddp", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 2, 1, 1, 1, 4, "fsdp2", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 2, 1, 1, 2, "fsdp2", "none"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 4, "fsdp2", "full"),
    ("tiny-llama", "tiny_llama_pretrain.yaml", 64, 16, 1, 1, 1, 1, 4, "ddp", "selective"),
    ("tiny-moe", "tiny_moe_pretrain.yaml", 64, 16, 1, 1, 1, 1, 2, "fsdp2", "none"),
    ("tiny-moe", "tiny_moe_pretrain.yaml", 64, 16, 1, 1, 1, 1, 8, "fsdp2", "none"),
    ("tiny-moe", "tiny_moe_pretrain.yaml", 64, 16, 1, 1, 1, 2, 2, "fsdp2", "none"),
    ("tiny-moe", "tiny_moe_pretrain.yaml", 64, 16, 1, 1, 1, 2, 8, "fsdp2", "none"),
    ("tiny-moe", "tiny_moe_pretrain.yaml", 64, 16, 1, 1, 1, 1, 4, "ddp", "none"),
    ("tiny-moe", "tiny_moe_pretrain.yaml", 64, 16, 1, 1, 1, 2, 4, "fsdp2", "full"),
    ("tiny-moe", "tiny_moe_pretrain.yaml", 64, 16, 1, 2, 1, 1, 2, "fsdp2", "none"),
    ("tiny-llama-long", "tiny_llama_pretrain.yaml", 1024, 4, 1, 1, 1, 1, 1, "fsdp2", "none"),
    ("tiny-llama-long", "tiny_llama_pretrain.yaml", 1024, 4, 1, 1, 2, 1, 1, "fsdp2", "none"),
    ("tiny-llama-long", "tiny_llama_pretrain.yaml", 1024, 4, 1, 1, 1, 1, 2, "fsdp2", "none"),
    ("tiny-llama-long", "tiny_llama_pretrain.yaml", 1024, 4, 1, 1, 1, 1, 2, "ddp", "none"),
    ("tiny-llama-long", "tiny_llama_pretrain.yaml", 1024, 4, 1, 1, 2, 1, 1, "fsdp2", "full"),
    ("tiny-llama-long", "tiny_llama_pretrain.yaml", 1024, 4, 1, 2, 1, 1, 1, "fsdp2", "none"),
]


def overrides(layout: tuple, steps: int, out: Path) -> list[str]:
    model, _, seq, gbs, tp, pp, cp, ep, mbs, strategy, recompute = layout
    # No validation: the pipeline does not validate yet, and only training steps are timed.
    return ["--model.pretrained_model_name_or_path", model, "--dataset.seq_length", str(seq),
            "--validation_dataset", "null", "--step_scheduler.global_batch_size", str(gbs),
            "--step_scheduler.local_batch_size", str(mbs), "--step_scheduler.max_steps", str(steps),
            "--step_scheduler.log_interval", "1", "--step_scheduler.val_check_interval", str(steps * 10),
            "--step_scheduler.checkpoint_interval", str(steps * 10), "--checkpoint.enabled", "false",
            "--checkpoint.checkpoint_dir", str(out), "--distributed.tp_size", str(tp),
            "--distributed.pp_size", str(pp), "--distributed.cp_size", str(cp), "--distributed.ep_size", str(ep),
            "--distributed.strategy", strategy] + (
                ["--distributed.activation_checkpointing", recompute] if recompute != "none" else [])


def train(layout: tuple, steps: int, out: Path, env: dict, dry_run: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "service.cli", "train", str(RECIPES / layout[1]), "--nproc-per-node", "2",
               *overrides(layout, steps, out)] + (["--dry-run"] if dry_run else [])
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def measure(layouts: list[tuple[int, tuple]], repeats: int, steps: int, db: Path, work: Path,
            check: bool = True) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RECIPE_ADVISOR_DB": str(db),
           "RECIPE_ADVISOR_CLUSTER": "this-machine", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    usable, skipped = [], []
    for index, layout in layouts:
        refused = train(layout, steps, work / f"dry{index}", env, dry_run=True) if check else None
        ok = refused is None or refused.returncode == 0
        (usable if ok else skipped).append((index, layout, "" if ok else refused.stderr.strip()[-300:]))
    for index, layout, why in skipped:
        print(f"skipped layout {index}: {layout}: {why}", file=sys.stderr)
    log = []
    for repeat in range(repeats):
        for index, layout, _ in usable:
            start = time.time()
            done = train(layout, steps, work / f"run{index}_{repeat}", env)
            log.append({"layout": index, "repeat": repeat, "code": done.returncode, "wall_s": time.time() - start})
            print(f"repeat {repeat} layout {index} {layout[0]} tp{layout[4]} pp{layout[5]} cp{layout[6]} "
                  f"ep{layout[7]} mbs{layout[8]} {layout[9]} {layout[10]}: exit {done.returncode} "
                  f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    return log


def analyse(db: Path) -> dict:
    from service.runs.calibration import evaluate, samples
    from service.runs.estimate import is_moe
    from service.runs.keys import layout_key, run_request_key
    from service.runs.store import RunsStore

    runs = RunsStore(str(db)).query(outcome="completed", source="yours", newest_first=False)
    by_layout = defaultdict(list)
    for run in runs:
        by_layout[(run.request.model, run_request_key(run), layout_key(run))].append(run)
    spreads = [(max(t) - min(t)) / statistics.median(t) for t in
               ([r.measurement.step_time_s for r in group] for group in by_layout.values()) if len(t) > 1]
    groups = {"dense": [r for r in runs if not is_moe(r)], "moe": [r for r in runs if is_moe(r)]}
    report = {"runs": len(runs), "layouts": len(by_layout),
              "noise_floor": statistics.median(spreads) if spreads else None, "groups": {}}
    for name, group in groups.items():
        if group:
            report["groups"][name] = evaluate(samples(group)).to_dict()
    report["table"] = [{"model": key[0], "layout": list(key[2]), "runs": len(group),
                        "step_time_s": statistics.median(r.measurement.step_time_s for r in group),
                        "estimate_s": group[0].measurement.estimate_step_time_s}
                       for key, group in sorted(by_layout.items(), key=str)]
    return report


def print_report(report: dict) -> None:
    floor = report["noise_floor"]
    print(f"{report['runs']} runs of {report['layouts']} layouts; noise floor (median spread of repeats) "
          f"{'-' if floor is None else f'{floor:.1%}'}")
    for name, g in report["groups"].items():
        if g["theta"] is None:
            print(f"  {name}: {g['runs']} runs, too few to calibrate")
            continue
        order = "-" if g["pair_order"] is None else (
            f"{g['pair_order']:.0%} (uncalibrated {g['uncalibrated_pair_order']:.0%})")
        print(f"  {name}: {g['runs']} runs, {g['layouts']} layouts: LOO median error {g['loo_error']:.1%} "
              f"(uncalibrated {g['uncalibrated_error']:.1%}); pair order {order} of {g['pairs']} pairs")
    for row in report["table"]:
        print(f"    {row['model']:<16} {str(row['layout']):<40} x{row['runs']} measured {row['step_time_s']:.4f} s "
              f"estimated {row['estimate_s'] or 0:.5f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--layouts", type=int, default=len(LAYOUTS), help="the first N layouts")
    parser.add_argument("--only", help="comma-separated indices into LAYOUTS (a reduced run), instead of --layouts")
    parser.add_argument("--skip-check", action="store_true", help="no `train --dry-run` of each layout first")
    parser.add_argument("--db", type=Path, help="the store to record into (default: a temporary one)")
    parser.add_argument("--analyse-only", action="store_true", help="no training: report on --db")
    parser.add_argument("--smoke", action="store_true", help="1 layout, 1 run of 3 steps (the test suite)")
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.steps, args.layouts = 1, 3, 1
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "runs.sqlite"
        if not args.analyse_only:
            picked = ([int(i) for i in args.only.split(",")] if args.only else range(args.layouts))
            measure([(i, LAYOUTS[i]) for i in picked], args.repeats, args.steps, db, Path(tmp), not args.skip_check)
        report = analyse(db)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if report["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
