"""AutoModel example recipes that a later AutoModel commit fixed: is the buggy version an error on the key the fix
changed, and is the fixed version free of errors the buggy one lacks?

Pairs come from AutoModel's history (``--mirror``, a clone or bare git dir of NVIDIA-NeMo/Automodel): each
first-parent commit whose subject says it fixes something (``fix``, ``typo``, ``rename``, ``broken``, ``wrong``,
``incorrect``) and that edits an ``examples/llm_finetune`` or ``examples/llm_pretrain`` recipe gives the recipe as
it was (buggy) and as the commit left it (fixed). Keys the fix changed: dotted keys whose value changed, that it
removed, or that it added. Each side is validated offline as an AutoModel recipe with its AutoModel version stated
as the date of its own commit (``--automodel-version``), and again with no version. Measured, never fitted: the
rules come from AutoModel's source (docs/rules.md). ``--smoke`` runs the pairs under
tests/service/validate/automodel_fixes (what the test suite runs; no mirror needed).

    .venv/bin/python benchmarks/automodel_fixes.py [--mirror PATH] [--smoke] [--list]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / ".mirror" / "NVIDIA-NeMo+Automodel" / "repo"
FIXTURES = REPO / "tests" / "service" / "validate" / "automodel_fixes"
FIX_SUBJECT = re.compile(r"^(fix\b|fix\(|.*\b(typo|rename|broken|wrong|incorrect)\b)", re.IGNORECASE)
EXAMPLES = ("examples/llm_finetune/", "examples/llm_pretrain/")


@dataclass
class Pair:
    name: str
    buggy: str
    fixed: str
    buggy_version: Optional[str]
    fixed_version: Optional[str]


def _git(mirror: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(mirror), *args], capture_output=True, text=True, check=True).stdout


def mirror_pairs(mirror: Path) -> Iterator[Pair]:
    log = _git(mirror, "log", "--first-parent", "--format=%H%x09%cs%x09%s", "--", *EXAMPLES)
    for line in log.splitlines():
        commit, date, subject = line.split("\t", 2)
        if not FIX_SUBJECT.match(subject):
            continue
        parent_date = _git(mirror, "log", "-1", "--format=%cs", f"{commit}^").strip()
        changed = _git(mirror, "diff", "--name-status", f"{commit}^", commit, "--", *EXAMPLES)
        for row in changed.splitlines():
            status, *paths = row.split("\t")
            if status != "M" or not paths[0].endswith(".yaml"):
                continue
            path = paths[0]
            yield Pair(f"{commit[:9]} {path}", _git(mirror, "show", f"{commit}^:{path}"),
                       _git(mirror, "show", f"{commit}:{path}"), parent_date, date)


def fixture_pairs(folder: Path = FIXTURES) -> Iterator[Pair]:
    """``NAME.buggy.yaml`` beside ``NAME.fixed.yaml``; each states its version in ``metadata.automodel_version``."""
    for buggy in sorted(folder.glob("*.buggy.yaml")):
        fixed = buggy.with_name(buggy.name.replace(".buggy.", ".fixed."))
        yield Pair(buggy.name, buggy.read_text(), fixed.read_text(), None, None)


def flatten(node, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        if not node and prefix:
            out[prefix] = {}
    elif isinstance(node, list):
        out[prefix] = repr(node)
    else:
        out[prefix] = node
    return out


def changed_keys(buggy: dict, fixed: dict) -> set[str]:
    a, b = flatten(buggy), flatten(fixed)
    return {k for k in a.keys() | b.keys() if a.get(k, "<absent>") != b.get(k, "<absent>")}


def _related(finding_key: Optional[str], keys: set[str]) -> bool:
    if not finding_key:
        return False
    return any(k == finding_key or k.startswith(finding_key + ".") or finding_key.startswith(k + ".") for k in keys)


def errors(text: str, version: Optional[str]) -> list:
    from service.configs.yamlio import YamlError
    from service.validate.document import validate_text

    try:
        return [f for f in validate_text(text, "recipe.yaml", dialect="automodel", automodel_version=version).findings
                if f.severity == "error"]
    except YamlError:
        return []


def _unversioned(text: str) -> str:
    """The recipe without the trailing ``metadata:`` block a fixture adds to state its version."""
    return text.split("\nmetadata:\n  automodel_version:")[0] + "\n"


def judge(pair: Pair, stated: bool) -> tuple[list[str], list[str]]:
    """(the codes of the buggy side's errors on a key the fix changed, errors only the fixed side has)."""
    try:
        keys = changed_keys(yaml.safe_load(pair.buggy) or {}, yaml.safe_load(pair.fixed) or {})
    except yaml.YAMLError:
        return [], []
    texts = (pair.buggy, pair.fixed) if stated else (_unversioned(pair.buggy), _unversioned(pair.fixed))
    buggy = errors(texts[0], pair.buggy_version if stated else None)
    fixed = errors(texts[1], pair.fixed_version if stated else None)
    caught = sorted({f.code for f in buggy if _related(f.key, keys)})
    before = {(f.code, f.key) for f in buggy}
    return caught, [f"{f.code} {f.key}" for f in fixed if (f.code, f.key) not in before]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mirror", type=Path, default=MIRROR)
    parser.add_argument("--smoke", action="store_true", help="the fixture pairs only (the test suite runs this)")
    parser.add_argument("--list", action="store_true", help="print each pair's outcome")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    sys.path.insert(0, str(REPO))
    if args.smoke or not args.mirror.exists():
        source, pairs = "fixtures", list(fixture_pairs())
    else:
        source, pairs = str(args.mirror), [p for p in mirror_pairs(args.mirror) if p.buggy.strip() != p.fixed.strip()]
    for stated in (True, False):
        caught, regressions = 0, 0
        for pair in pairs:
            codes, new = judge(pair, stated)
            caught += bool(codes)
            regressions += bool(new)
            if args.list and stated and (codes or new):
                print(f"  {' '.join(codes) or '-':17} {pair.name}" + (f"  fixed-only: {new}" if new else ""))
        label = "version stated (the commit's date)" if stated else "no version"
        print(f"{source}: {len(pairs)} pairs, {label}: {caught} buggy versions are an error on a changed key; "
              f"{regressions} fixed versions have an error the buggy one lacks")


if __name__ == "__main__":
    main()
