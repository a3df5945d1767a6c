"""AutoModel's schema by version, read from the bundled ``recipe_index/data/automodel_schema.json`` (offline).

The file (``python -m recipe_index.generate.automodel_schema``) holds, per AutoModel release and ``main`` snapshot,
the top-level sections the LLM recipe reads, the keys of the sections AutoModel checks, and the callables a
``_target_`` may name with their keywords. A recipe states its version as ``metadata.automodel_version`` (a release
``0.4.0``, a checkout date ``2026-05-01``, or ``main``), or validate takes ``--automodel-version``. A date is
judged under the ``main`` snapshots around it (the last before the day, the day's, the first after: a finding must
hold in each); a recipe with no version is judged
under every release and the newest ``main`` (what users install): a finding under all of them is an error, one
under some a warning that names the versions and the key to write down (``versioned.across``).
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
from dataclasses import dataclass
from difflib import get_close_matches
from functools import lru_cache
from typing import Any, Optional

from trainer.contract.bridge_version import parse_bridge_version

SCHEMA_FILE = "automodel_schema.json"
VERSION_KEY = "metadata.automodel_version"
FORMS = "a release (0.4.0, v0.5.0), a checkout's commit date (2026-05-01), or main/latest"
# Sections no AutoModel recipe reads but its tooling does: `ci:` (AutoModel's CI launcher, tests/ci_tests) and
# `metadata:` (this product's: the recipe's version, a description).
TOOL_SECTIONS = frozenset({"ci", "metadata"})


@dataclass(frozen=True)
class Judged:
    """The schema versions a recipe is judged under; ``stated`` None: unknown (every release and newest main)."""

    indices: tuple[int, ...]
    stated: Optional[str] = None
    source: str = VERSION_KEY
    problem: Optional[str] = None  # why a stated version was not used (RA-A015)


@lru_cache(maxsize=256)
def _indices(spans: str) -> frozenset[int]:
    out: set[int] = set()
    for part in spans.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return frozenset(out)


def _holds(entries: list, index: int) -> Optional[list]:
    """The entry ``[spans, value]`` whose versions include ``index``, or None."""
    return next((entry for entry in entries if index in _indices(entry[0])), None)


class AutomodelSchema:
    def __init__(self, data: dict[str, Any]):
        self.versions: list[dict] = data["versions"]
        self._sections: dict[str, str] = data["sections"]
        self._strict: dict[str, list] = data["strict"]
        self._targets: dict[str, dict[str, list]] = data["targets"]
        self.renamed: dict[str, list] = data.get("renamed", {})  # old section -> [new or None, commit, how]
        self._names_by_index: dict[int, dict[str, list[str]]] = {}
        self._lookups: dict[tuple[str, int], tuple[str, Optional[frozenset[str]]]] = {}
        self._read: dict[int, frozenset[str]] = {}
        self._main = [i for i, v in enumerate(self.versions) if v["kind"] == "main"]

    # -- which versions -------------------------------------------------------------------------------------
    @property
    def newest(self) -> int:
        return self._main[-1]

    def unknown(self) -> Judged:
        releases = tuple(i for i, v in enumerate(self.versions) if v["kind"] == "release")
        return Judged(releases + (self.newest,))

    def judged(self, text: Any, source: str = VERSION_KEY) -> Judged:
        """The versions ``text`` names; ValueError naming the accepted forms when it names none."""
        try:
            version = parse_bridge_version(text)
        except ValueError:
            raise ValueError(f"{str(text)!r} is not an AutoModel version: write {FORMS}") from None
        if version.newest:
            return Judged((self.newest,), version.text, source)
        if version.date is not None:
            return Judged(self._around(version.date), version.text, source)
        wanted = ".".join(map(str, version.release))
        for i, meta in enumerate(self.versions):
            if meta["kind"] == "release" and meta["name"] == wanted:
                return Judged((i,), version.text, source)
        known = ", ".join(v["name"] for v in self.versions if v["kind"] == "release")
        raise ValueError(f"AutoModel {version.text} is not a release this validator knows ({known}): write the "
                         f"checkout's commit date instead (2026-05-01)")

    def _around(self, date: dt.date) -> tuple[int, ...]:
        """The ``main`` snapshots a checkout of that day may sit between: the last one before the day, those of
        the day, and the first one after it (a date says nothing about the hour)."""
        dates = [dt.date.fromisoformat(self.versions[i]["date"]) for i in self._main]
        low, high = bisect.bisect_left(dates, date), bisect.bisect_right(dates, date)
        picked = self._main[max(low - 1, 0):high + 1]
        return tuple(picked)

    def name(self, index: int) -> str:
        meta = self.versions[index]
        return meta["name"] if meta["kind"] == "main" else f"v{meta['name']}"

    # -- sections -------------------------------------------------------------------------------------------
    def sections_at(self, index: int) -> frozenset[str]:
        if index not in self._read:
            self._read[index] = frozenset(s for s, spans in self._sections.items() if index in _indices(spans))
        return self._read[index]

    def section_read(self, name: str, index: int) -> bool:
        sections = self.sections_at(index)
        return name in sections or name in TOOL_SECTIONS or any(
            s.endswith("*") and name.startswith(s[:-1]) for s in sections)

    def ever_read(self, name: str) -> list[int]:
        return sorted(_indices(self._sections[name])) if name in self._sections else []

    def strict_at(self, section: str, index: int) -> Optional[frozenset[str]]:
        """The keys a strict section takes at this version, None when it is not checked there."""
        entry = _holds(self._strict.get(section, []), index)
        return frozenset(entry[1].split(",")) if entry else None

    def strategies(self) -> frozenset[str]:
        """Every `distributed.strategy` name some version takes (its strategy map's keys)."""
        return frozenset(s.partition("@")[2] for s in self._strict if s.startswith("distributed@"))

    def parses_distributed(self, index: int) -> bool:
        """`distributed:` is read by parse_distributed_section (strategy options beside the sizes) here."""
        return any(section.startswith("distributed@") and _holds(entries, index)
                   for section, entries in self._strict.items())

    # -- targets --------------------------------------------------------------------------------------------
    def _module_at(self, module: str, index: int) -> Optional[dict]:
        names = self._targets.get(module)
        return names if names is not None and _holds(names[""], index) else None

    def lookup(self, target: str, index: int) -> tuple[str, Optional[frozenset[str]]]:
        """("found", keywords or None for any) | ("unknown", None): not judged | ("missing", None)."""
        key = (target, index)
        if key not in self._lookups:  # a folder of recipes names the same few targets many times
            self._lookups[key] = self._lookup(target, index)
        return self._lookups[key]

    def _lookup(self, target: str, index: int) -> tuple[str, Optional[frozenset[str]]]:
        parts = target.split(".")
        for cut in range(len(parts), 0, -1):
            names = self._module_at(".".join(parts[:cut]), index)
            if names is None:
                continue
            rest = parts[cut:]
            if not rest:
                return "unknown", None  # a module: the loader returns it, whatever it is called with
            entry = _holds(names.get(".".join(rest), []), index)
            if entry is not None:
                return "found", (frozenset(entry[1].split(",")) - {""} if entry[1] is not None else None)
            if len(rest) > 1 and _holds(names.get(f"{rest[0]}.*", []), index):
                return "unknown", None  # a class built on torch/transformers: its inherited names are not read
            return "missing", None
        return "missing", None

    def nearest_target(self, target: str, index: int) -> Optional[str]:
        """The name AutoModel has at this version closest to ``target``: the same name where it moved, else the
        closest name in the same module."""
        module, _, name = target.rpartition(".")
        last = name
        homes = self._by_name(index).get(last, [])
        if homes:
            return sorted(homes, key=lambda full: -_common_prefix(full, target))[0]
        names = self._module_at(module, index)
        if names is not None:
            pool = [n for n in names if n and not n.endswith(".*") and _holds(names[n], index)]
            close = get_close_matches(last, pool, n=1)
            if close:
                return f"{module}.{close[0]}"
        return None

    def _by_name(self, index: int) -> dict[str, list[str]]:
        if index in self._names_by_index:
            return self._names_by_index[index]
        out: dict[str, list[str]] = self._names_by_index.setdefault(index, {})
        for module, names in self._targets.items():
            for name, entries in names.items():
                if name and "." not in name and _holds(entries, index):
                    out.setdefault(name, []).append(f"{module}.{name}")
        return out


def _common_prefix(a: str, b: str) -> int:
    count = 0
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        count += 1
    return count


@lru_cache(maxsize=1)
def schema() -> AutomodelSchema:
    from recipe_index.generate import INDEX_DIR

    return AutomodelSchema(json.loads((INDEX_DIR / "data" / SCHEMA_FILE).read_text(encoding="utf-8")))
