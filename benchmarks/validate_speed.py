"""How long CI waits for `recipe-advisor validate` and `--help`.

Each figure comes with a reference measured in the same run, so the ratio
means something on any machine:
- `validate <whole bundled index>` (a fresh process) against a fresh process
  that only parses the same files with `yaml.safe_load` (no rules);
- `recipe-advisor --help` against a bare `python -c pass` start.
Runs alternate A/B, best of N (the minimum is the least noisy estimate on a
shared machine).

    .venv/bin/python benchmarks/validate_speed.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INDEX = REPO / "recipe_index" / "recipes"

PARSE_ONLY = (
    "import sys, pathlib, yaml\n"
    "L = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)\n"
    "for p in sorted(pathlib.Path(sys.argv[1]).rglob('*.yaml')):\n"
    "    yaml.load(p.read_text(), Loader=L)\n"
)


def timed(cmd: list[str]) -> float:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def best_of(pairs: int, a: list[str], b: list[str]) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(pairs):
        ta.append(timed(a))
        tb.append(timed(b))
    return min(ta), min(tb)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path in seconds (the suite runs it): one repeat")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    py = sys.executable
    files = len(list(INDEX.rglob("*.yaml")))
    validate, parse = best_of(args.repeats, [py, "-m", "service.cli.app", "validate", str(INDEX)],
                              [py, "-c", PARSE_ONLY, str(INDEX)])
    helps, bare = best_of(args.repeats, [py, "-m", "service.cli.app", "--help"], [py, "-c", "pass"])
    print(f"files in index                 {files}")
    print(f"validate whole index           {validate:.3f} s  (target < 2 s)")
    print(f"  reference: parse-only        {parse:.3f} s  -> validate / parse = {validate / parse:.2f}x")
    print(f"recipe-advisor --help          {helps:.3f} s  (target < 0.5 s)")
    print(f"  reference: python -c pass    {bare:.3f} s  -> help / bare python = {helps / bare:.2f}x")


if __name__ == "__main__":
    main()
