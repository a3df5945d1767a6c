"""How fast does a repeated `tune` answer when the runs store already holds every trial?

A store is filled by one `tune` of the request whose trials a fake trainer answers at once (the trials are real
store records: the same trial configs and software a real tune records). Then, interleaved ``--repeats`` times,
the same command line runs as a user runs it (``python -m service.cli tune ...``, a fresh process: start-up and
imports count) and, as the reference, ``python -c pass`` (the interpreter's own start-up); with ``--baseline DIR``
also the same command from another checkout (an older commit), in the same rounds. Bytecode caches are written
and one untimed run of each comes first, as an installed package runs. Reported: the median wall time of each and
their ratio, wall time and CPU time (user + system: what moves little with the shared machine's load);
``--importtime`` adds the slowest imports of one run (``-X importtime``).

    .venv/bin/python benchmarks/tune_repeat_speed.py [--repeats 5] [--baseline DIR] [--importtime 15] [--json OUT]
    .venv/bin/python benchmarks/tune_repeat_speed.py --smoke     # 1 repeat: checks the script
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

REQUEST = ["--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain", "--engine", "bundled",
           "--trials", "6", "--steps", "4", "--warmup", "1"]
ANSWERED = re.compile(r"(\d+) trial\(s\), (\d+) from the store")


def fill_store(db: Path, work: Path) -> None:
    """One tune of REQUEST into ``db``, each trial answered by the fake trainer of tune_finds_best."""
    from tune_finds_best import fake_runner

    from service.cli.app import main
    from service.tune.search import Tuner

    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with mock.patch.dict(Tuner.__init__.__kwdefaults__, {"runner": fake_runner}), quiet[0], quiet[1]:
        code = main(["tune", *REQUEST, "--db", str(db), "--workdir", str(work / "trials"), "--format", "json"])
    if code != 0:
        raise SystemExit(f"filling the store failed (exit {code})")


def _env(code: Path = ROOT) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", "RECIPE_ADVISOR_RECORD_RUNS": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode: compiling is not the figure
    return env


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, code: Path = ROOT) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one run: CPU time (user + system) moves little with the shared machine's load,
    wall time with it."""
    cpu, start = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=_env(code), capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - start, _children_cpu_s() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, cpu, done.stdout


def tune_command(db: Path) -> list[str]:
    return [sys.executable, "-m", "service.cli", "tune", *REQUEST, "--db", str(db)]


def slowest_imports(db: Path, cwd: Path, top: int) -> list[tuple[str, float]]:
    """The ``top`` packages by the time their own modules took to import (s, self time summed over the
    package's modules; ``service.runs`` and the like are split one level deeper) in one repeated tune."""
    command = [sys.executable, "-X", "importtime", *tune_command(db)[1:]]
    done = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    by_package: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \| *(\S+)", line)
        if match:
            parts = match.group(2).split(".")
            package = ".".join(parts[:2]) if parts[0] in ("service", "trainer") else parts[0]
            by_package[package] = by_package.get(package, 0.0) + int(match.group(1)) / 1e6
    return sorted(by_package.items(), key=lambda item: -item[1])[:top]


def main(argv: Optional[list[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", type=Path, metavar="DIR", help="also time this checkout's tune (a worktree)")
    parser.add_argument("--importtime", type=int, default=0, metavar="N", help="list the N slowest imports")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--smoke", action="store_true", help="one repeat: checks the script")
    args = parser.parse_args(argv)
    repeats = 1 if args.smoke else args.repeats
    with tempfile.TemporaryDirectory(prefix="tune-repeat-") as tmp:
        work = Path(tmp)
        db = work / "runs.sqlite"
        fill_store(db, work)
        codes = {"tune": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in [*codes, "python"]}
        for _ in range(repeats + 1):  # the first round untimed (bytecode written); then interleaved rounds
            for name, code in codes.items():
                wall, cpu, out = timed(tune_command(db), work, code)
                answered = ANSWERED.search(out)
                if not answered or answered.group(1) != answered.group(2):
                    raise SystemExit(f"{name}: the repeated tune did not answer every trial from the store:\n"
                                     f"{out[-2000:]}")
                runs[name].append((wall, cpu))
            runs["python"].append(timed([sys.executable, "-c", "pass"], work)[:2])
        imports = slowest_imports(db, work, args.importtime) if args.importtime else []
    result: dict = {"repeats": repeats}
    for name, timings in runs.items():
        wall, cpu = (statistics.median(t[i] for t in timings[1:]) for i in (0, 1))
        result[name] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                        "wall_runs_s": [round(t[0], 3) for t in timings[1:]]}
    for name in codes:
        result[name].update(wall_ratio=round(result[name]["wall_s"] / result["python"]["wall_s"], 1),
                            cpu_ratio=round(result[name]["cpu_s"] / result["python"]["cpu_s"], 1))
    result["slowest_imports_s"] = [[p, round(s, 3)] for p, s in imports]
    py = result["python"]
    print(f"`python -c pass`: {py['wall_s']:.3f} s wall, {py['cpu_s']:.3f} s CPU (medians of {repeats})")
    for name in codes:
        r = result[name]
        print(f"repeated tune{' (' + str(args.baseline) + ')' if name == 'baseline' else ''}, every trial from the "
              f"store: {r['wall_s']:.2f} s wall ({r['wall_ratio']}x), {r['cpu_s']:.2f} s CPU ({r['cpu_ratio']}x)")
    for package, seconds in imports:
        print(f"  import {package}: {seconds:.3f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
