"""How loading and validating a config scales with the number of keys in one mapping.

A posted config is data from a client: its cost must grow linearly with its size, or one
request under the body cap ties up a worker for minutes. Each shape
is timed three ways in the same process, so the ratios mean something on any machine:

- reference: ``yaml.load`` with PyYAML's C loader (parse and build, no limits, no positions);
- ``service.configs.yamlio.load_yaml``: limits, positions, duplicate-key detection;
- ``service.validate.document.validate_text``: what ``POST /v1/validate`` runs (load + every rule).

Shapes: N keys under ``dataset:`` (a section that takes any key: no findings), and N unknown
top-level keys (one RA-C001 finding with a did-you-mean each). Best of ``--repeat`` runs.

    .venv/bin/python benchmarks/yaml_load.py [--keys 4000 16000 40000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plan_speed import timed  # noqa: E402  (this folder: best-of-N wall and CPU time)

from service.configs.yamlio import load_yaml  # noqa: E402
from service.validate.document import validate_text  # noqa: E402

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def section_keys(n: int) -> str:
    return "dataset:\n" + "".join(f"  k{i}: {i}\n" for i in range(n))


def top_level_keys(n: int) -> str:
    return "".join(f"k{i}: {i}\n" for i in range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[4000, 16000, 40000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path in seconds (the suite runs it): 400 and 800 keys, once")
    args = parser.parse_args()
    if args.smoke:
        args.keys, args.repeat = [400, 800], 1
    print(f"{'shape':<11} {'keys':>6} {'KB':>5} {'yaml.load':>10} {'load_yaml':>10} {'ratio':>6} "
          f"{'validate':>9} {'ratio':>6} {'findings':>8}")
    for shape, make in (("dataset.*", section_keys), ("top-level", top_level_keys)):
        previous = None
        for n in args.keys:
            text = make(n)
            reference = timed(lambda: yaml.load(text, Loader=LOADER), args.repeat)[0]
            loaded = timed(lambda: load_yaml(text), args.repeat)[0]
            validated, _, report = timed(lambda: validate_text(text), args.repeat)
            findings = len(report.findings)
            print(f"{shape:<11} {n:>6} {len(text) // 1024:>5} {reference:>9.3f}s {loaded:>9.3f}s "
                  f"{loaded / reference:>5.1f}x {validated:>8.3f}s {validated / reference:>5.1f}x {findings:>8}")
            if previous is not None:
                print(f"{'':<11} keys x{n / previous[0]:.1f} -> load_yaml time x{loaded / previous[1]:.1f}, "
                      f"validate time x{validated / previous[2]:.1f}")
            previous = (n, loaded, validated)


if __name__ == "__main__":
    main()
