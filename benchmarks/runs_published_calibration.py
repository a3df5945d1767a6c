"""Calibration on real GPU data: NVIDIA's published Megatron throughput rows, grouped by (software release, GPU
type), stand in for users' clusters. Each group of at least 5 rows is calibrated on its own rows
(service/runs/calibration.py), leave-one-layout-out within the group, against the uncalibrated estimate of the
same rows; dense and MoE apart.

    .venv/bin/python benchmarks/runs_published_calibration.py [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.runs.calibration import evaluate, samples  # noqa: E402
from service.runs.estimate import is_moe  # noqa: E402
from service.runs.published import published_records  # noqa: E402


def report(max_groups: int | None = None) -> dict:
    groups = defaultdict(list)
    for record in published_records(estimate=False):
        groups[("moe" if is_moe(record) else "dense", record.provenance.release, record.request.gpu_type)].append(
            record)
    out: dict = {}
    for kind in ("dense", "moe"):
        keys = sorted((k for k in groups if k[0] == kind), key=str)[:max_groups]
        rows = []
        for key in keys:
            r = evaluate(samples(groups[key]))
            if r.theta is not None:
                rows.append({"release": key[1], "gpu": key[2], "runs": r.runs, "layouts": r.layouts,
                             "calibrated": r.loo_error, "uncalibrated": r.uncalibrated_error})
        out[kind] = {"groups": rows, "median_calibrated": statistics.median(g["calibrated"] for g in rows) if rows
                     else None, "median_uncalibrated": statistics.median(g["uncalibrated"] for g in rows) if rows
                     else None, "better": sum(g["calibrated"] < g["uncalibrated"] for g in rows)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true", help="the first 3 groups of each kind")
    args = parser.parse_args()
    result = report(3 if args.smoke else None)
    for kind, r in result.items():
        if r["median_calibrated"] is None:
            print(f"{kind}: no group of 5 rows")
            continue
        print(f"{kind}: {len(r['groups'])} (release, GPU) groups; median of the groups' LOO median error: calibrated "
              f"{r['median_calibrated']:.1%}, uncalibrated {r['median_uncalibrated']:.1%}; calibrated better in "
              f"{r['better']} of {len(r['groups'])}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
