"""Write ``recipe_index/data/automodel_schema.json`` from NeMo AutoModel's git history (read with ``ast``).

    python -m recipe_index.generate.automodel_schema --repo PATH/TO/Automodel[.git] [--out FILE]

Versions: every release tag (``vX.Y.Z``, release candidates aside), ``main`` on the 1st and 16th of each month
from the first commit with the LLM recipe (``recipes/llm/train_ft.py``), ``main``'s newest commit, and each
``main`` commit that changed the top-level sections the LLM recipe reads (so a renamed section is placed at its
commit, e.g. ``autopipeline:`` -> ``distributed.pipeline`` in 194103bfc). A date is judged under the snapshots
around its day (``service.validate.automodel.versions``), so a callable added mid-month is never refused.

Per version: the top-level sections the LLM recipe and the CLI read, the keys of the sections AutoModel checks
(its ``StepScheduler``'s keywords, ``PipelineConfig``'s and ``MoEParallelizerConfig``'s fields under
``distributed:``, each strategy's config class in ``_STRATEGY_MAP``), and every public module-level function and
class (with classmethods/staticmethods) under ``nemo_automodel`` with the keywords it takes. Each name is stored
once with a bit mask of the versions that have it, which keeps the file small. Nothing is imported.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

from recipe_index.generate import INDEX_DIR
from recipe_index.generate.automodel_source import (
    ModuleDefs,
    config_node_api,
    module_defs,
    module_name,
    recipe_sections,
)

OUT = INDEX_DIR / "data" / "automodel_schema.json"
LLM_RECIPE = "nemo_automodel/recipes/llm/train_ft.py"
# What the LLM recipe reads its root config in: the recipe, its base class, the distributed setup it calls
# and the CLI that picks the recipe (`recipe:`) and the launcher (`slurm:`, `k8s:`, ...).
RECIPE_FILES = (LLM_RECIPE, "nemo_automodel/recipes/base_recipe.py", "nemo_automodel/recipes/_typed_config.py",
                "nemo_automodel/recipes/_dist_setup.py", "nemo_automodel/recipes/_dist_utils.py",
                "nemo_automodel/_cli/app.py", "nemo_automodel/cli/app.py")
# parse_distributed_section's module: where `distributed:` takes `strategy`, `pipeline:` and `moe:` blocks
DIST_SETUPS = ("nemo_automodel/recipes/_dist_setup.py", "nemo_automodel/recipes/_dist_utils.py")
CONFIG_LOADER = "nemo_automodel/components/config/loader.py"
# Keywords the recipe passes to StepScheduler itself (train_ft.py's build_step_scheduler), not the YAML.
STEP_SCHEDULER_PASSED = {"dp_size", "dataloader", "process_group"}
# Sections AutoModel renamed, read from the commits that moved the examples: old -> (new, commit, how).
RENAMED_SECTIONS = {
    "parallelizer": ("moe_config", "8a4f070ce", "its options move to the MoE parallelizer config"),
    "moe_config": ("distributed.moe", "194103bfc", "its options move under distributed.moe, without _target_"),
    "autopipeline": ("distributed.pipeline", "194103bfc", "its options move under distributed.pipeline, without "
                     "_target_"),
    "distributed_config": ("distributed", "194103bfc", "its options move beside distributed.strategy, without "
                           "_target_"),
    "slurm": (None, "35b5ed9c9", "submit with `sbatch slurm.sub` (AutoModel's BREAKING_CHANGES.md)"),
    "k8s": (None, "35b5ed9c9", "the CLI launches locally, with skypilot: or nemo_run:"),
    "kubernetes": (None, "35b5ed9c9", "the CLI launches locally, with skypilot: or nemo_run:"),
}
_RELEASE_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


class Git:
    def __init__(self, repo: Path):
        self.repo = str(repo)
        self._batch = subprocess.Popen(["git", "-C", self.repo, "cat-file", "--batch"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE)

    def run(self, *args: str) -> str:
        return subprocess.run(["git", "-C", self.repo, *args], check=True, capture_output=True,
                              text=True).stdout

    def blob(self, sha: str) -> str:
        self._batch.stdin.write(f"{sha}\n".encode())
        self._batch.stdin.flush()
        header = self._batch.stdout.readline().split()
        size = int(header[2])
        data = self._batch.stdout.read(size + 1)[:-1]
        return data.decode("utf-8", errors="replace")

    def tree(self, commit: str) -> dict[str, str]:
        """path -> blob sha of every .py file under nemo_automodel/ at the commit."""
        out = {}
        for line in self.run("ls-tree", "-r", commit, "nemo_automodel").splitlines():
            meta, path = line.split("\t", 1)
            if path.endswith(".py"):
                out[path] = meta.split()[2]
        return out

    def close(self) -> None:
        self._batch.stdin.close()
        self._batch.wait()


def _date(iso: str) -> dt.date:
    return dt.datetime.fromisoformat(iso.strip()).astimezone(dt.timezone.utc).date()


def _main_commits(git: Git) -> list[tuple[str, dt.date]]:
    """main's first-parent history from the first commit with the LLM recipe, oldest first."""
    first = git.run("log", "--format=%H", "--diff-filter=A", "--", LLM_RECIPE).split()[-1]
    lines = git.run("rev-list", "--first-parent", "--reverse", "--format=%H %cI", f"{first}^..HEAD").splitlines()
    return [(h, _date(d)) for h, d in (line.split() for line in lines if not line.startswith("commit "))]


def _show(git: Git, commit: str, path: str) -> str:
    try:
        return git.run("show", f"{commit}:{path}")
    except subprocess.CalledProcessError:
        return ""


def _sections_at(git: Git, commit: str) -> frozenset[str]:
    api = frozenset(config_node_api(_show(git, commit, CONFIG_LOADER)))
    found: set[str] = set()
    for path in RECIPE_FILES:
        found |= recipe_sections(_show(git, commit, path), api)
    return frozenset(found)


def timeline(git: Git) -> list[dict]:
    """The versions to index, oldest first (see the module's docstring for why these)."""
    main = _main_commits(git)
    chosen: dict[str, dict] = {}
    touching = set(git.run("log", "--first-parent", "--format=%H", "--", *RECIPE_FILES).split())
    previous = None
    for commit, date in main:
        if commit in touching or previous is None:
            sections = _sections_at(git, commit)
            if sections != previous:
                chosen[commit] = {"date": date}
            previous = sections
    for year, month in sorted({(d.year, d.month) for _, d in main}):
        for day in (1, 16):
            cut = dt.date(year, month, day)
            before = [c for c, d in main if d < cut]
            if before and main[0][1] < cut <= main[-1][1]:
                chosen.setdefault(before[-1], {"date": dict(main)[before[-1]]})
    chosen.setdefault(main[-1][0], {"date": main[-1][1]})
    versions = [{"name": f"main@{v['date'].isoformat()}", "date": v["date"].isoformat(), "commit": c[:10],
                 "kind": "main"} for c, v in chosen.items()]
    for tag in git.run("tag").split():
        if _RELEASE_TAG.match(tag):
            commit = git.run("rev-list", "-1", tag).strip()
            date = _date(git.run("log", "-1", "--format=%cI", commit))
            versions.append({"name": tag[1:], "date": date.isoformat(), "commit": commit[:10], "kind": "release"})
    versions.sort(key=lambda v: (v["date"], v["kind"] == "release"))
    seen, unique = set(), []
    for version in versions:  # one name per main date: the day's last commit
        if version["name"] in seen:
            unique = [u for u in unique if u["name"] != version["name"]]
        seen.add(version["name"])
        unique.append(version)
    return unique


class Version:
    """One version's modules, with class keywords resolved through in-package bases and re-exports."""

    def __init__(self, modules: dict[str, ModuleDefs]):
        self.modules = modules
        self._kw: dict[str, object] = {}

    def lookup(self, qualified: str, depth: int = 0):
        """("function"|"class", module, name) for a qualified name, following re-exports; None if unknown."""
        module, _, name = qualified.rpartition(".")
        defs = self.modules.get(module)
        if defs is None or depth > 8:
            return None
        if name in defs.functions:
            return "function", module, name
        if name in defs.classes:
            return "class", module, name
        if name in defs.imports:
            return self.lookup(defs.imports[name], depth + 1)
        return None

    def class_keywords(self, qualified: str, stack: tuple = ()) -> Optional[list[str]]:
        if qualified in self._kw:
            return self._kw[qualified]
        module, _, name = qualified.rpartition(".")
        info = self.modules[module].classes[name]
        result: Optional[list[str]]
        bases = [self.lookup(b) if b != "?" else None for b in info.bases]
        if info.has_init:
            result = info.init
        elif any(b is None or b[0] != "class" or f"{b[1]}.{b[2]}" in stack for b in bases):
            result = None  # a base outside nemo_automodel (torch, transformers): its signature is not read
        elif info.dataclass:
            result = []
            for base in reversed(bases):
                inherited = self.class_keywords(f"{base[1]}.{base[2]}", stack + (qualified,))
                if inherited is None:
                    result = None
                    break
                result += [k for k in inherited if k not in result]
            if result is not None:
                result += [f for f in info.fields if f not in result]
        elif bases:
            result = self.class_keywords(f"{bases[0][1]}.{bases[0][2]}", stack + (qualified,))
        else:
            result = []
        self._kw[qualified] = result
        return result

    def class_methods(self, qualified: str, stack: tuple = ()) -> tuple[dict, bool]:
        """(classmethods/staticmethods with their keywords, open: a base outside the package may add more)."""
        module, _, name = qualified.rpartition(".")
        info = self.modules[module].classes[name]
        methods, is_open = {}, False
        for base in reversed(info.bases):
            found = self.lookup(base) if base != "?" else None
            if found is None or found[0] != "class" or qualified in stack:
                is_open = True
                continue
            inherited, base_open = self.class_methods(f"{found[1]}.{found[2]}", stack + (qualified,))
            methods.update(inherited)
            is_open = is_open or base_open
        methods.update(info.methods)
        return methods, is_open

    def entries(self) -> dict[str, dict[str, Optional[str]]]:
        """module -> {name: "kw1,kw2" or None (any keywords)}; ``Class.*`` marks a class open to more names."""
        out: dict[str, dict[str, Optional[str]]] = {}
        packages = {m.rpartition(".")[0] for m in self.modules}
        for module, defs in self.modules.items():
            names: dict[str, Optional[str]] = {}
            for name, kws in defs.functions.items():
                names[name] = _sig(kws)
            for name in defs.classes:
                self._class_entries(names, name, f"{module}.{name}")
            if module in packages:  # a package's re-exports (a plain module's imports are not its API)
                for name, target in defs.imports.items():
                    if name.startswith("_") or name in names:
                        continue
                    found = self.lookup(target)
                    if found is None and target.startswith("nemo_automodel."):
                        continue
                    if found is None:
                        names[name] = None  # an outside name the package re-exports: its keywords are not read
                    elif found[0] == "function":
                        names[name] = _sig(self.modules[found[1]].functions[found[2]])
                    else:
                        self._class_entries(names, name, f"{found[1]}.{found[2]}")
            out[module] = names
        return out

    def _class_entries(self, names: dict, name: str, qualified: str) -> None:
        names[name] = _sig(self.class_keywords(qualified))
        methods, is_open = self.class_methods(qualified)
        for method, kws in methods.items():
            names[f"{name}.{method}"] = _sig(kws)
        if is_open:
            names[f"{name}.*"] = None


def _sig(kws: Optional[list[str]]) -> Optional[str]:
    return None if kws is None else ",".join(kws)


def _strict_sections(version: Version, git: Git, tree: dict[str, str]) -> dict[str, list[str]]:
    """The keys of the sections AutoModel refuses unknown keys in, at this version."""
    out: dict[str, list[str]] = {}
    scheduler = version.lookup("nemo_automodel.components.training.step_scheduler.StepScheduler")
    if scheduler:
        kws = version.class_keywords(f"{scheduler[1]}.{scheduler[2]}")
        if kws is not None:
            out["step_scheduler"] = [k for k in kws if k not in STEP_SCHEDULER_PASSED]
    setup = "".join(git.blob(tree[path]) for path in DIST_SETUPS if path in tree)
    for section, name in (("pipeline", "PipelineConfig"), ("moe", "MoEParallelizerConfig")):
        if f'"{section}"' not in setup:
            continue  # `distributed:` has no such block at this version
        found = [f"{m}.{name}" for m, d in version.modules.items() if name in d.classes]
        found = [q for q in found if version.class_keywords(q) is not None]
        if found:
            out[f"distributed.{section}"] = version.class_keywords(sorted(found, key=len)[0])
    strategies = next((d.strategy_map for d in version.modules.values() if d.strategy_map), {})
    for strategy, qualified in (strategies.items() if '"strategy"' in setup else ()):
        found = version.lookup(qualified) if qualified != "?" else None
        kws = version.class_keywords(f"{found[1]}.{found[2]}") if found and found[0] == "class" else None
        if kws is not None:
            out[f"distributed@{strategy}"] = kws
    return out


def build(repo: Path, progress=None) -> dict:
    git = Git(repo)
    versions = timeline(git)
    parsed: dict[str, ModuleDefs] = {}
    sections: dict[str, int] = {}
    strict: dict[str, dict[Optional[str], int]] = {}
    targets: dict[str, dict[str, dict[Optional[str], int]]] = {}
    for index, meta in enumerate(versions):
        bit = 1 << index
        tree = git.tree(meta["commit"])
        modules = {}
        for path, sha in tree.items():
            if sha not in parsed:
                source = git.blob(sha)
                parsed[sha] = module_defs(source, path)
            modules[module_name(path)] = parsed[sha]
        version = Version(modules)
        for section in _sections_at(git, meta["commit"]):
            sections[section] = sections.get(section, 0) | bit
        for section, keys in _strict_sections(version, git, tree).items():
            key = ",".join(keys)
            strict.setdefault(section, {})[key] = strict.get(section, {}).get(key, 0) | bit
        for module, names in version.entries().items():
            table = targets.setdefault(module, {})
            table.setdefault("", {})[None] = table.get("", {}).get(None, 0) | bit  # the module itself
            for name, sig in names.items():
                table.setdefault(name, {})[sig] = table.get(name, {}).get(sig, 0) | bit
        if progress:
            progress(f"{meta['name']}: {len(modules)} modules")
    git.close()
    return {
        "source": "NVIDIA-NeMo/Automodel",
        "generator": "python -m recipe_index.generate.automodel_schema",
        "versions": versions,
        "sections": {name: spans(mask) for name, mask in sorted(sections.items())},
        "renamed": {old: list(new) for old, new in RENAMED_SECTIONS.items()},
        "strict": {s: [[spans(mask), keys] for keys, mask in sorted(v.items(), key=lambda kv: kv[1])]
                   for s, v in sorted(strict.items())},
        "targets": {m: {n: [[spans(mask), sig] for sig, mask in sorted(sigs.items(), key=lambda kv: kv[1])]
                        for n, sigs in sorted(names.items())} for m, names in sorted(targets.items())},
    }


def spans(mask: int) -> str:
    """A bit mask of version indices as ranges: ``0-27,30``."""
    out, index = [], 0
    while mask >> index:
        if mask >> index & 1:
            start = index
            while mask >> (index + 1) & 1:
                index += 1
            out.append(str(start) if start == index else f"{start}-{index}")
        index += 1
    return ",".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipe_index.generate.automodel_schema", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, required=True, help="a clone (or bare git dir) of NVIDIA-NeMo/Automodel")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    data = build(args.repo, progress=lambda line: print(line, file=sys.stderr))
    args.out.write_text(json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {len(data['versions'])} versions to {args.out} ({args.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
