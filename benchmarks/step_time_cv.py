"""Leave-one-model-family-out cross-validation of the step-time constants fitted on published throughput.

The MoE step factor (``service.estimate.constants.MOE_MEASURED_STEP_FACTOR``, and any constant added to ``GRID``)
is fitted on ``recipe_index/data/published_throughput.json``. To say how well it carries to a model nobody fitted
it on, every MoE family is held out in turn: the constants are fitted on the other families' records (coordinate
descent over a grid, minimising the mean absolute log error) and the held-out family is estimated with them. Only
the newest release of each setup (request and layout) counts: the same layout moves between releases as the
software does, and older software is not what a user runs.

    .venv/bin/python benchmarks/step_time_cv.py [--markdown] [--write-bands]

Prints, per family, the in-sample error (constants fitted on every family) and the out-of-sample error (fitted
without the family), the pooled out-of-sample median absolute error for dense and MoE records, and the pair order
of layouts of one setup measured more than 10 % apart. ``--write-bands`` stores the per-family out-of-sample errors
and the pooled medians as ``service/estimate/family_bands.json`` (with this provenance): the error bands within which
`recommend` keeps a recipe's layout over the planner's estimate (service/estimate/bands.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from step_time_published import DATA, _release, layout_key, request_key, scorable, score  # noqa: E402

from recipe_index import find_bundled_model  # noqa: E402
from service.estimate import constants as C  # noqa: E402

# The fitted constants and the grid each is searched on (physically plausible ranges: see constants.py).
BANDS = ROOT / "service" / "estimate" / "family_bands.json"
GRID = {"MOE_MEASURED_STEP_FACTOR": tuple(round(1.0 + 0.05 * i, 2) for i in range(25))}
PAIR_GAP = 0.10


def newest_records(records: list[dict]) -> list[dict]:
    """The newest release of each setup (request and layout) among the scorable records."""
    newest: dict[tuple, dict] = {}
    for r in records:
        if not scorable(r):
            continue
        key = request_key(r) + layout_key(r)
        if key not in newest or _release(r) > _release(newest[key]):
            newest[key] = r
    return list(newest.values())


def family(r: dict) -> str:
    return find_bundled_model(r["model"]).family


def _set(values: dict) -> None:
    for name, value in values.items():
        setattr(C, name, value)


def errors(records: list[dict], values: dict) -> list[float]:
    _set(values)
    return [math.log(row["estimate"] / row["measured"]) for row in score(records)]


def fit(records: list[dict], start: dict, rounds: int = 3) -> dict:
    """Coordinate descent over GRID minimising the mean absolute log error on ``records``."""
    best = dict(start)
    best_loss = statistics.mean(abs(x) for x in errors(records, best))
    for _ in range(rounds):
        moved = False
        for name, grid in GRID.items():
            for value in grid:
                trial = {**best, name: value}
                loss = statistics.mean(abs(x) for x in errors(records, trial))
                if loss < best_loss - 1e-9:
                    best, best_loss, moved = trial, loss, True
        if not moved:
            break
    _set(best)
    return best


def median_abs(logs: list[float]) -> float:
    return math.exp(statistics.median(abs(x) for x in logs)) - 1 if logs else float("nan")


def pair_order(rows: list[dict], min_gap: float = PAIR_GAP) -> tuple[int, int]:
    """(agreeing, total) over pairs of layouts of one setup measured more than ``min_gap`` apart."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[request_key(row["r"])].append(row)
    agree = total = 0
    for members in groups.values():
        for a, b in combinations(members, 2):
            if abs(math.log(a["measured"] / b["measured"])) < math.log1p(min_gap):
                continue
            total += 1
            agree += (a["measured"] > b["measured"]) == (a["estimate"] > b["estimate"])
    return agree, total


def bands_document(lines: list[tuple], dense_by_family: dict[str, list[float]], moe_out: list[float],
                   dense_logs: list[float], data: Path) -> dict:
    """The out-of-sample error of each family and the pooled medians, with where they come from."""
    families = {held: {"kind": "moe", "records": n, "out_of_sample": round(outs, 4)} for held, n, _, outs, _ in lines}
    families.update({name: {"kind": "dense", "records": len(logs), "out_of_sample": round(median_abs(logs), 4)}
                     for name, logs in sorted(dense_by_family.items())})
    return {"provenance": "benchmarks/step_time_cv.py --write-bands: median absolute error of the step-time estimate "
                          f"against {data.relative_to(ROOT) if data.is_relative_to(ROOT) else data.name} (newest "
                          "release of each setup), each MoE family estimated with the constants fitted without it; "
                          "dense records are out of sample by construction (no constant is fitted on them)",
            "median": {"moe": round(median_abs(moe_out), 4), "dense": round(median_abs(dense_logs), 4)},
            "families": families}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="every grid's first, middle and last value only (the suite "
                    "runs it)")
    ap.add_argument("--write-bands", action="store_true", help=f"store the bands as {BANDS.relative_to(ROOT)}")
    args = ap.parse_args()
    if args.smoke:
        GRID.update({name: grid[::len(grid) // 2] for name, grid in GRID.items()})
    shipped = {name: getattr(C, name) for name in GRID}
    records = newest_records(json.loads(args.data.read_text()))
    moe = [r for r in records if find_bundled_model(r["model"]).is_moe]
    dense = [r for r in records if not find_bundled_model(r["model"]).is_moe]
    families = sorted({family(r) for r in moe})
    in_sample = fit(moe, shipped)
    print("fitted on every MoE family:", in_sample, "(shipped:", shipped, ")")
    in_rows = {id(row["r"]): row for row in score(moe)}
    out_rows: list[dict] = []
    lines = []
    for held in families:
        train = [r for r in moe if family(r) != held]
        test = [r for r in moe if family(r) == held]
        values = fit(train, shipped)
        rows = score(test)
        out_rows += rows
        ins = [math.log(in_rows[id(row["r"])]["estimate"] / row["measured"]) for row in rows]
        outs = [math.log(row["estimate"] / row["measured"]) for row in rows]
        lines.append((held, len(rows), median_abs(ins), median_abs(outs), values))
    _set(shipped)
    dense_rows = score(dense)
    dense_logs = [math.log(row["estimate"] / row["measured"]) for row in dense_rows]
    dense_by_family: dict[str, list[float]] = defaultdict(list)
    for row, log in zip(dense_rows, dense_logs):
        dense_by_family[family(row["r"])].append(log)
    print("| family | kind | records | in-sample median abs error | out-of-sample |")
    print("|---|---|---|---|---|")
    for held, n, ins, outs, _ in lines:
        print(f"| {held} | MoE | {n} | {ins:.1%} | {outs:.1%} |")
    for name, logs in sorted(dense_by_family.items()):
        print(f"| {name} | dense | {len(logs)} | {median_abs(logs):.1%} | {median_abs(logs):.1%} |")
    moe_out = [math.log(row["estimate"] / row["measured"]) for row in out_rows]
    print(f"MoE out of sample: median abs error {median_abs(moe_out):.1%} over {len(moe_out)} records; "
          f"in sample {median_abs([math.log(r['estimate'] / r['measured']) for r in in_rows.values()]):.1%}")
    print(f"dense (no MoE constant applies; out of sample by construction): {median_abs(dense_logs):.1%} over "
          f"{len(dense_logs)} records")
    agree, total = pair_order(out_rows + dense_rows)
    print(f"pair order, out of sample (layouts of one setup measured > {PAIR_GAP:.0%} apart): {agree} of {total}")
    if args.write_bands:
        document = bands_document(lines, dense_by_family, moe_out, dense_logs, args.data)
        BANDS.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {BANDS.relative_to(ROOT)}")
    if args.markdown:
        for held, n, ins, outs, values in lines:
            print(f"| {held} | " + " | ".join(f"{v:g}" for v in values.values()) + " |")


if __name__ == "__main__":
    main()
