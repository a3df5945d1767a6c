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


def stand_in_set(folder: Path, files: int = STAND_IN_FILES) -> None:
    """Recipes in AutoModel's shape: the test recipes with their model, batch and layout varied."""
    bases = sorted(TEST_RECIPES.glob("*.yaml"))
    for i in range(files):
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


def _mutants(data: dict, text: str):
    """(name, mutated data, --gpus to judge it at, the codes that catch it, the key they must name)."""
    from service.validate.automodel.dialect import stated_world
    from service.validate.automodel.facts import model_name, sizes_of, whole
    from service.validate.automodel.validate import default_resolver
    from service.validate.resolution import _resolve_model

    sizes, world = sizes_of(data), stated_world(text, data).size
    scheduler = data.get("step_scheduler") or {}
    dp, lbs = sizes.dp_at(world), whole(scheduler.get("local_batch_size")) or 1
    if dp and dp > 1 and whole(scheduler.get("global_batch_size")):
        bad = {**data, "step_scheduler": {**scheduler, "global_batch_size": lbs * dp + lbs}}
        yield "gbs", bad, None, {"RA-A009"}, "step_scheduler.global_batch_size"
    model, _, _ = _resolve_model(model_name(data), default_resolver())
    if model is None:
        return
    dist = data.get("distributed") or {}
    if not model.architecture.startswith("mla") and model.num_attention_heads % (2 * model.num_key_value_heads) == 0:
        tp = 2 * model.num_key_value_heads  # divides the heads, not the KV heads
        gpus = tp * sizes.cp * sizes.pp * sizes.ep
        yield "tp-kv", {**data, "distributed": {**dist, "tp_size": tp, "dp_size": None}}, gpus, {"RA-A008"}, \
            "distributed.tp_size"
    if model.num_experts:
        ep = next(n for n in (3, 5, 7, 11, 13) if model.num_experts % n)
        gpus = sizes.tp * sizes.cp * sizes.pp * ep
        yield "ep-experts", {**data, "distributed": {**dist, "ep_size": ep, "dp_size": None}}, gpus, {"RA-L008"}, \
            "distributed.ep_size"


def mutants(folder: Path) -> None:
    """Each file broken three ways, validated in process: how many mutants each rule catches with its key."""
    from service.validate.document import validate_text

    caught, total, missed = collections.Counter(), collections.Counter(), []
    for path in sorted(folder.rglob("*.yaml")):
        text = path.read_text()
        header = "".join(line for line in text.splitlines(keepends=True) if line.lstrip().startswith("#"))
        data = yaml.safe_load(text)
        for name, bad, gpus, codes, key in _mutants(data, text):
            total[name] += 1
            findings = validate_text(header + yaml.safe_dump(bad, sort_keys=False), str(path), gpus=gpus).findings
            if any(f.code in codes and f.key == key and f.severity == "error" for f in findings):
                caught[name] += 1
            else:
                missed.append(f"{name} {path.name}")
    for name in total:
        print(f"mutant {name:12} caught {caught[name]} of {total[name]} with the key named")
    for line in missed[:10]:
        print(f"  missed: {line}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, help="a folder of AutoModel recipes (default: a generated stand-in set)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", action="store_true", help="also count findings read as recipe-advisor configs")
    parser.add_argument("--mutants", action="store_true", help="also break each file three ways and count the catches")
    parser.add_argument("--smoke", action="store_true", help="one repeat over a 20-file stand-in set, with "
                        "--compare and --mutants (the suite runs it)")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.compare, args.mutants = 1, True, True
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir
        if folder is None:
            folder = Path(scratch)
            stand_in_set(folder, 20 if args.smoke else STAND_IN_FILES)
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
        if args.mutants:
            os.environ["HF_HUB_OFFLINE"] = "1"
            sys.path.insert(0, str(REPO))
            mutants(folder)


if __name__ == "__main__":
    main()
