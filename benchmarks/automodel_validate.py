"""Validating a folder of NeMo AutoModel recipes: the findings by code, and how long CI waits.

Give it AutoModel's LLM examples (`examples/llm_finetune` and `examples/llm_pretrain` of NVIDIA-NeMo/Automodel,
220 files) with --dir; without one it generates a stand-in set of the same size from the test recipes in
tests/service/validate/automodel_recipes (sizes and models varied). Timed: one fresh `recipe-advisor validate`
process over the folder, with HF_HUB_OFFLINE unset (an AutoModel recipe's models come from the cache only, so
nothing waits on the Hub), against a fresh process that only parses the same files with PyYAML's C loader.
Alternating A/B, best of N. With --compare it also counts the findings when the files are read as this product's
own config format (`--dialect recipe-advisor`), what validate reported before it knew the dialect.

    .venv/bin/python benchmarks/automodel_validate.py [--dir PATH] [--repeats 3] [--compare]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TEST_RECIPES = REPO / "tests" / "service" / "validate" / "automodel_recipes"
STAND_IN_FILES = 220

PARSE_ONLY = (
    "import sys, pathlib, yaml\n"
    "L = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)\n"
    "for p in sorted(pathlib.Path(sys.argv[1]).rglob('*.yaml')):\n"
    "    yaml.load(p.read_text(), Loader=L)\n"
)
MODELS = ["meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B",
          "google/gemma-3-270m", "some-org/not-cached-model"]


def stand_in_set(folder: Path) -> None:
    """220 recipes in AutoModel's shape: the test recipes with their model, batch and layout varied."""
    bases = sorted(TEST_RECIPES.glob("*.yaml"))
    for i in range(STAND_IN_FILES):
        base = bases[i % len(bases)]
        text = base.read_text()
        header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
        data = yaml.safe_load(text)
        data["model"]["pretrained_model_name_or_path"] = MODELS[i % len(MODELS)]
        data["step_scheduler"]["global_batch_size"] = 8 * (1 + i % 16)
        data["distributed"]["tp_size"] = (1, 2, 4)[i % 3]
        (folder / f"recipe_{i:03d}.yaml").write_text(header + yaml.safe_dump(data, sort_keys=False))


def env() -> dict:
    values = dict(os.environ, PYTHONPATH=str(REPO))
    values.pop("HF_HUB_OFFLINE", None)  # offline by default all the same: what CI gets without setting it
    values.pop("RECIPE_ADVISOR_ALLOW_HUB", None)
    return values


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def counts(folder: Path, dialect: str) -> tuple[dict, collections.Counter]:
    cmd = [sys.executable, "-m", "service.cli.app", "validate", str(folder), "--format", "json", "--dialect", dialect]
    out = json.loads(subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True).stdout)
    by_code = collections.Counter(f"{f['code']} {f['severity']}" for r in out["files"] for f in r["findings"])
    return out["summary"], by_code


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, help="a folder of AutoModel recipes (default: a generated stand-in set)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", action="store_true", help="also count findings read as recipe-advisor configs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir
        if folder is None:
            folder = Path(scratch)
            stand_in_set(folder)
        files = len(list(folder.rglob("*.yaml")))
        py = sys.executable
        validate, parse = [], []
        for _ in range(args.repeats):
            validate.append(timed([py, "-m", "service.cli.app", "validate", str(folder)]))
            parse.append(timed([py, "-c", PARSE_ONLY, str(folder)]))
        summary, by_code = counts(folder, "auto")
        print(f"files                            {files}{'' if args.dir else ' (generated stand-in set)'}")
        print(f"validate (dialect auto)          {min(validate):.3f} s  (target < 3 s)")
        print(f"  reference: parse-only          {min(parse):.3f} s  -> validate / parse = "
              f"{min(validate) / min(parse):.2f}x")
        print(f"findings: {summary['errors']} error(s), {summary['warnings']} warning(s)")
        for code, n in sorted(by_code.items()):
            print(f"  {code:20} {n}")
        if args.compare:
            before, before_codes = counts(folder, "recipe-advisor")
            print(f"read as recipe-advisor configs: {before['errors']} error(s), {before['warnings']} warning(s)")
            for code, n in sorted(before_codes.items()):
                print(f"  {code:20} {n}")


if __name__ == "__main__":
    main()
