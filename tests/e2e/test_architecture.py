"""The import structure of service/, trainer/ and recipe_index/, read from the source with ``ast``.

Every import counts: at module level, inside functions, under ``TYPE_CHECKING``. ``import a.b`` imports
``a.b``; ``from a.b import c`` imports ``a.b.c`` where that is a module of ours, else ``a.b``; relative
imports are resolved against the importing module's package. A string naming a module (uvicorn's
``"service.http.app:app"``, a config's ``_target_``) is no import.

The rules:
- the service reaches the trainer only through ``trainer.contract``, which imports no torch and nothing
  else of the trainer, so that validating, planning and serving never load torch;
- the HTTP service and the CLI are two front ends of one service: neither imports the other;
- no import cycle inside a package (a cycle makes the import order decide what is defined);
- the recipe index at run time never imports its build-time generator;
- the service's top level stays a handful of shared modules; everything else lives in a subpackage;
- the estimates and the layout arithmetic sit below the rules: they never import ``service.validate``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

from tests.paths import REPO

PACKAGES = ("service", "trainer", "recipe_index")
MAX_SERVICE_TOP_LEVEL_MODULES = 6


@dataclass(frozen=True)
class Import:
    importer: str  # dotted name of the importing module
    path: str  # its file, relative to the repository root
    line: int
    target: str  # dotted name of the imported module

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.target}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three packages."""
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[_module_name(path)] = path
    return files


MODULES = _source_files()


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    package = importer if is_package else importer.rpartition(".")[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports_of(module: str, source: str, path: str, is_package: bool) -> Iterator[Import]:
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            source_module = _resolve(node, module, is_package)
            if source_module == "__future__":
                continue
            for alias in node.names:
                submodule = f"{source_module}.{alias.name}"
                yield Import(module, path, node.lineno, submodule if submodule in MODULES else source_module)


def _imports_of_file(module: str, path: Path) -> Iterator[Import]:
    return _imports_of(module, path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix(),
                       path.name == "__init__.py")


# One entry per importing line and module (``from a import B, C`` imports ``a`` once).
IMPORTS: list[Import] = list(dict.fromkeys(
    imp for module, path in MODULES.items() for imp in _imports_of_file(module, path)))


def _is_within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _imports_from(package: str) -> list[Import]:
    return [imp for imp in IMPORTS if _is_within(imp.importer, package)]


def _offending(found: list[Import]) -> str:
    return "\n".join(f"  {imp}" for imp in found)


# ----------------------------------------------------------------------------------------- service <-> trainer

def test_the_service_imports_only_the_trainer_contract():
    found = [imp for imp in _imports_from("service")
             if _is_within(imp.target, "trainer") and not _is_within(imp.target, "trainer.contract")]
    assert not found, ("service/ may import from trainer/ only trainer.contract.* (torch-free); move what it needs "
                       "into trainer/contract/:\n" + _offending(found))


def test_the_contract_imports_nothing_of_the_trainer_outside_it():
    found = [imp for imp in _imports_from("trainer.contract")
             if _is_within(imp.target, "trainer") and not _is_within(imp.target, "trainer.contract")]
    assert not found, ("trainer/contract/ must import nothing from trainer/ outside trainer/contract/ (those "
                       "modules import torch):\n" + _offending(found))


def test_the_contract_imports_no_torch():
    found = [imp for imp in _imports_from("trainer.contract") if _is_within(imp.target, "torch")]
    assert not found, "trainer/contract/ must be torch-free, also in functions:\n" + _offending(found)


def test_importing_every_contract_module_loads_no_torch():
    contract = sorted(name for name in MODULES if _is_within(name, "trainer.contract"))
    code = ("import importlib, sys\n"
            f"for name in {contract!r}:\n"
            "    importlib.import_module(name)\n"
            "    assert 'torch' not in sys.modules, f'importing {name} loaded torch'\n"
            "loaded = sorted(m for m in sys.modules\n"
            "                if m.startswith('trainer.') and not m.startswith('trainer.contract'))\n"
            "assert not loaded, f'importing trainer.contract loaded {loaded}'\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


# ----------------------------------------------------------------------------------------- front ends

@pytest.mark.parametrize("importer, imported", [("service.http", "service.cli"), ("service.cli", "service.http")])
def test_the_http_service_and_the_cli_do_not_import_each_other(importer, imported):
    found = [imp for imp in _imports_from(importer) if _is_within(imp.target, imported)]
    assert not found, (f"{importer.replace('.', '/')}/ must not import {imported.replace('.', '/')}/ (what both "
                       "need belongs in a package below them):\n" + _offending(found))


# ----------------------------------------------------------------------------------------- layers

@pytest.mark.parametrize("package", ["service.estimate", "service.layouts"])
def test_the_estimates_and_the_layout_arithmetic_do_not_import_the_rules(package):
    found = [imp for imp in _imports_from(package) if _is_within(imp.target, "service.validate")]
    assert not found, (f"{package.replace('.', '/')}/ sits below the rules: what both need (divisors, the pipeline "
                       "split) lives in service/layouts/:\n" + _offending(found))


# ----------------------------------------------------------------------------------------- cycles

def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in IMPORTS:
        if imp.target in MODULES and imp.target != imp.importer:
            edges[imp.importer].add(imp.target)
    return edges


def _strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _a_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module, as a list of modules ending where it starts."""
    start, members = component[0], set(component)
    came_from: dict[str, Optional[str]] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(edges.get(node, ()) & members):
                if succ == start:
                    path = [node]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return [start] + path[::-1][1:] + [start]
                if succ not in came_from:
                    came_from[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {component}")


def _innermost_package(modules: list[str]) -> str:
    parts = [name.split(".") for name in modules]
    common = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    while common and ".".join(common) not in MODULES:  # a module's own name is not a package
        common.pop()
    return ".".join(common)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_a_package(package):
    """Each package's modules and subpackages, every subpackage included: a cycle anywhere fails, named by
    the innermost package that holds it."""
    edges = _graph()
    nodes = sorted(name for name in MODULES if _is_within(name, package))
    restricted = {node: {t for t in edges.get(node, ()) if _is_within(t, package)} for node in nodes}
    cycles = []
    for component in _strongly_connected(nodes, restricted):
        cycle = _a_cycle(component, restricted)
        inside = [f"    {a} -> {b}  ({_import_line(a, b)})" for a in component for b in sorted(restricted[a])
                  if b in component]
        cycles.append(f"cycle in {_innermost_package(component)}: {' -> '.join(cycle)}\n"
                      f"  every import between its modules ({', '.join(component)}):\n" + "\n".join(inside))
    assert not cycles, "import cycles (a type or helper belongs below what uses it):\n" + "\n".join(cycles)


def _import_line(importer: str, target: str) -> str:
    imp = next(imp for imp in IMPORTS if imp.importer == importer and imp.target == target)
    return f"{imp.path}:{imp.line}"


# ----------------------------------------------------------------------------------------- recipe index, layout

def test_the_recipe_index_at_run_time_does_not_import_its_generator():
    generator = "recipe_index.generate"
    found = [imp for imp in _imports_from("recipe_index")
             if not _is_within(imp.importer, generator) and _is_within(imp.target, generator)]
    assert not found, ("recipe_index/generate/ is build-time only; what the index reads at run time lives beside "
                       "it in recipe_index/:\n" + _offending(found))


def test_the_service_top_level_holds_a_few_shared_modules():
    top = sorted(path.name for path in (REPO / "service").glob("*.py"))
    assert len(top) <= MAX_SERVICE_TOP_LEVEL_MODULES, (
        f"service/ holds {len(top)} modules directly ({', '.join(top)}); at most {MAX_SERVICE_TOP_LEVEL_MODULES}: "
        "put the others in the subpackage they belong to")


SAMPLE = """
import trainer.contract.text
from typing import TYPE_CHECKING
from trainer.contract import preflight, nothing_of_ours
from . import sibling
from ..up import name

if TYPE_CHECKING:
    from service.facts import Facts

def run():
    from trainer.launch import main
"""


def test_the_import_reader_sees_every_kind_of_import():
    """The reader itself, on a sample: module, function-level, TYPE_CHECKING and relative imports, and a
    submodule named by ``from``."""
    found = {(imp.line, imp.target) for imp in _imports_of("service.pkg.mod", SAMPLE, "service/pkg/mod.py", False)}
    assert found == {(2, "trainer.contract.text"), (3, "typing"), (4, "trainer.contract.preflight"),
                     (4, "trainer.contract"), (5, "service.pkg"), (6, "service.up"), (9, "service.facts"),
                     (12, "trainer.launch")}
    assert _resolve(ast.parse("from . import b").body[0], "pkg.sub.mod", False) == "pkg.sub"
    assert _resolve(ast.parse("from ..x import b").body[0], "pkg.sub", True) == "pkg.x"
    assert _resolve(ast.parse("from .. import b").body[0], "pkg.sub.mod", False) == "pkg"


def test_the_cycle_finder_finds_each_knot_and_a_shortest_cycle_through_it():
    edges = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"f"}}
    components = _strongly_connected(sorted(edges), edges)
    assert components == [["a", "b", "c"], ["d", "e"]]
    assert _a_cycle(["a", "b", "c"], edges) == ["a", "b", "a"]
    assert _a_cycle(["d", "e"], edges) == ["d", "e", "d"]
