"""Cold load time of the bundled index, against a naive full-YAML parse of every recipe.

Run: .venv/bin/python benchmarks/index_load.py [--repeat N]

Each measurement runs in a fresh interpreter (the index caches per process). The reference
is the same listing done by parsing every recipe file completely with PyYAML's C loader,
which is what reading the metadata would cost without the block-level fast path.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Imports are paid before the clock starts: both sides import the same modules.
INDEX = """
import time, yaml
import recipe_index as ri
t = time.perf_counter()
ri.list_models(); ri.list_hardware(); n = len(ri.list_recipes())
print(time.perf_counter() - t, n)
"""

NAIVE = """
import time, yaml
import recipe_index as ri
from recipe_index.recipes import recipe_files
t = time.perf_counter()
ri.list_models(); ri.list_hardware()
loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
n = sum(1 for p in recipe_files() if yaml.load(p.read_text(), Loader=loader)["metadata"])
print(time.perf_counter() - t, n)
"""

IMPORT = """
import time; t = time.perf_counter()
import recipe_index
print(time.perf_counter() - t, 0)
"""


def _run(code: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    seconds, count = out.stdout.split()
    return float(seconds), int(count)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path in seconds (the suite runs it): one repeat")
    args = parser.parse_args()
    if args.smoke:
        args.repeat = 1
    index = [_run(INDEX) for _ in range(args.repeat)]
    naive = [_run(NAIVE) for _ in range(args.repeat)]
    t_import = statistics.median(_run(IMPORT)[0] for _ in range(args.repeat))
    t_index = statistics.median(s for s, _ in index)
    t_naive = statistics.median(s for s, _ in naive)
    print(f"recipes listed: {index[0][1]}")
    print(f"import recipe_index (pydantic, yaml):           {t_import * 1000:.0f} ms (median of {args.repeat})")
    print(f"index cold load (models + hardware + recipes):  {t_index * 1000:.0f} ms")
    print(f"naive full-YAML listing of the same files:      {t_naive * 1000:.0f} ms")
    print(f"ratio naive / index: {t_naive / t_index:.2f}x")

    import recipe_index as ri

    ri.resolve_model("llama3-8b")
    start = time.perf_counter()
    for _ in range(10000):
        ri.resolve_model("meta-llama/Meta-Llama-3-8B")
    print(f"warm resolve_model of a bundled alias: {(time.perf_counter() - start) / 10000 * 1e6:.1f} us per call")


if __name__ == "__main__":
    main()
