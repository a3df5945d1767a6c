"""`plan` with a full runs store against an empty one, in the same script: the store must not slow plan down.

Stores of RUNS runs are written once: one of other models, GPU types and clusters only; one where 3 % are of the
planned request (the layouts of its first rows) and 2 % more of its cluster, so its group is calibrated (the
request's model family has enough runs for its own fit) and rows are measured. plan then reads each (measured.yours
of each row, the calibration: fitted on the first call and kept in the store, read afterwards). Reported: the
minimum over repeats of process CPU time of plan and the store's part, the stores taking turns in each repeat,
against an empty store (target <= 1.2x), plus the first call's fit.

    .venv/bin/python benchmarks/runs_plan_speed.py [--runs 10000] [--repeats 7] [--smoke]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.plan.planner import make_request, plan  # noqa: E402
from service.runs.advice import with_runs  # noqa: E402
from service.runs.schema import RunRecord, utcnow  # noqa: E402
from service.runs.store import RunsStore, _row_values, runs_table  # noqa: E402

REQUESTS = [("llama3-8b", 8, "h100", dict(seq_length=8192, global_batch_size=128, precision="bf16")),
            ("llama3-70b", 64, "h100", dict(seq_length=8192, global_batch_size=128, precision="bf16"))]
OTHERS = [("llama31-70b", "h200"), ("qwen3-8b", "b200"), ("deepseek-v3", "b300"), ("llama32-1b", "gb200"),
          ("qwen3-30b-a3b", "h200")]


def synthetic_run(i: int, rng: random.Random, model: str, gpu: str, cluster: str, seq: int, gbs: int,
                  layout: dict | None = None, nodes: int = 1) -> RunRecord:
    tp = rng.choice([1, 2, 4, 8])
    layout = layout or {"tp": tp, "dp": 8 // tp, "micro_batch_size": rng.choice([1, 2, 4]), "sharding": "optimizer"}
    return RunRecord.model_validate({
        "provenance": {"engine": "megatron", "release": "25.09", "cluster": cluster, "team": f"t{i % 7}"},
        "request": {"model": model, "gpu_type": gpu, "gpus_per_node": 8, "nodes": nodes, "seq_length": seq,
                    "global_batch_size": gbs},
        "layout": layout,
        "measurement": {"timed_steps": 20, "step_time_s": 1.0 + rng.random() + i * 1e-9,
                        "estimate_step_time_s": 1.2}})


def row_layouts(planned, count: int = 20) -> list[dict]:
    """The layouts of the plan's first rows, as a user measures what plan proposed."""
    return [{"tp": r.structure.tp, "pp": r.structure.pp, "vp": r.structure.vp, "cp": r.structure.cp,
             "ep": r.structure.ep, "etp": r.structure.etp, "dp": r.dp, "micro_batch_size": r.micro_batch_size,
             "recompute": r.layout.recompute, "sharding": r.sharding} for r in planned.fitting[:count]]


def fill(store: RunsStore, runs: int, layouts: list[dict], request: tuple, own_group: bool = True,
         seed: int = 0) -> None:
    """``runs`` runs in one transaction: with ``own_group``, 3 % of the planned request (its first rows' layouts) and
    2 % more of its cluster; the rest of other models, GPU types and clusters."""
    rng = random.Random(seed)
    rows = []
    for i in range(runs):
        if own_group and i % 33 == 0:
            model, gpus, _, fields = request
            record = synthetic_run(i, rng, model, "h100", "eos", fields["seq_length"], fields["global_batch_size"],
                                   rng.choice(layouts), nodes=gpus // 8)
        elif own_group and i % 50 == 1:
            record = synthetic_run(i, rng, "llama32-1b", "h100", "eos", 4096, 256)
        else:
            model, gpu = OTHERS[i % len(OTHERS)]
            record = synthetic_run(i, rng, model, gpu, f"c{i % 3}", 4096, 512)
        rows.append(_row_values(record.model_copy(update={"recorded_at": utcnow()}), record.content_key()))
    with store.engine.begin() as conn:
        conn.execute(runs_table.insert(), rows)


def cpu_seconds(request, stores: dict[str, RunsStore | None], repeats: int) -> dict[str, float]:
    """The minimum process CPU time of plan and its store part, per store; the stores take turns in each repeat,
    so that a change of the machine's load weighs on all alike."""
    best = dict.fromkeys(stores, float("inf"))
    for _ in range(repeats):
        for name, store in stores.items():
            start = time.process_time()
            with_runs(plan(request), store)
            best[name] = min(best[name], time.process_time() - start)
    return best


def measure_request(case: tuple, runs: int, repeats: int) -> None:
    model, gpus, gpu, fields = case
    request = make_request(model, gpus, gpu, **fields)
    layouts = row_layouts(plan(request))
    with tempfile.TemporaryDirectory() as tmp:
        empty, elsewhere, mine = (RunsStore(f"{tmp}/{name}.sqlite") for name in ("empty", "elsewhere", "mine"))
        fill(elsewhere, runs, layouts, case, own_group=False)
        fill(mine, runs, layouts, case)
        start = time.process_time()
        result = with_runs(plan(request), mine)  # the first call fits the group's calibration and keeps it
        first = time.process_time() - start
        measured = sum(1 for row in result.layouts if result.runs.yours(row))
        applied = result.runs.calibration.describe().split(":")[0]
        ms = {name: seconds * 1000 for name, seconds in cpu_seconds(
            request, {"none": None, "empty": empty, "elsewhere": elsewhere, "mine": mine}, repeats).items()}
    print(f"plan {model} on {gpus} x {gpu}, CPU ms (min of {repeats}): no store {ms['none']:.1f}; empty store "
          f"{ms['empty']:.1f}; {runs:,} runs of other requests {ms['elsewhere']:.1f} "
          f"({ms['elsewhere'] / ms['empty']:.2f}x empty); {runs:,} runs with {measured} rows measured and the "
          f"estimates {applied} {ms['mine']:.1f} ({ms['mine'] / ms['empty']:.2f}x empty); first call with the fit "
          f"{first * 1000:.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="200 runs, 2 repeats")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.repeats = 200, 2
    for model, gpus, gpu, fields in REQUESTS[:1] if args.smoke else REQUESTS:
        measure_request((model, gpus, gpu, fields), args.runs, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
