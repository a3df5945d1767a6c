"""Read one version of NeMo AutoModel's source with ``ast`` (never imported): what a recipe's YAML can name.

``module_defs`` parses one module: its public module-level functions and classes with the keywords each takes
(``None`` where a ``**kwargs`` takes any), a class's classmethods and staticmethods (``Class.method``), and the
names it imports (a package re-exports them; AutoModel's loader resolves ``_target_`` by the longest importable
module prefix and ``getattr`` for the rest, refusing private names). ``recipe_sections`` reads which top-level
sections a recipe module takes from its root config (``self.cfg.x``, ``cfg.get("x.y")``, ``"x" in cfg``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional

ROOT_CONFIG_NAMES = ("cfg", "config")  # the root config's names in AutoModel's recipes and CLI
CLI_CONFIG_NAME = "config"  # the CLI pops its launcher sections (`slurm`, `skypilot`, ...) off the YAML's dict
_FIELD_FACTORIES = ("field", "dataclasses.field")


@dataclass
class ClassInfo:
    init: Optional[list[str]] = None  # an explicit __init__'s keywords (None: it takes **kwargs)
    has_init: bool = False
    dataclass: bool = False
    fields: list[str] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)  # qualified names; "?" for a base outside nemo_automodel
    methods: dict[str, Optional[list[str]]] = field(default_factory=dict)  # classmethods and staticmethods


@dataclass
class ModuleDefs:
    functions: dict[str, Optional[list[str]]] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name it is bound to
    strategy_map: dict[str, str] = field(default_factory=dict)  # `distributed.strategy` name -> config class


def module_name(path: str) -> str:
    """``nemo_automodel/a/b.py`` -> ``nemo_automodel.a.b``; a package's ``__init__.py`` -> the package."""
    parts = path[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _keywords(fn: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> Optional[list[str]]:
    if fn.args.kwarg is not None:
        return None
    names = [a.arg for a in fn.args.args] + [a.arg for a in fn.args.kwonlyargs]
    return names[1:] if drop_first and names else names


def _decorator_names(node) -> list[str]:
    names = []
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        names.append(ast.unparse(target))
    return names


def _is_init_false(value: Optional[ast.expr]) -> bool:
    if not (isinstance(value, ast.Call) and ast.unparse(value.func) in _FIELD_FACTORIES):
        return False
    return any(k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
               for k in value.keywords)


def _class_info(node: ast.ClassDef, resolve) -> ClassInfo:
    info = ClassInfo(dataclass=any(d.rpartition(".")[2] == "dataclass" for d in _decorator_names(node)))
    info.bases = [resolve(ast.unparse(b)) for b in node.bases if ast.unparse(b) not in ("object", "Generic")
                  and not ast.unparse(b).startswith(("Generic[", "Protocol"))]
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = _decorator_names(item)
            if item.name == "__init__":
                info.has_init, info.init = True, _keywords(item, drop_first=True)
            elif not item.name.startswith("_") and ("classmethod" in decorators or "staticmethod" in decorators):
                info.methods[item.name] = _keywords(item, drop_first="classmethod" in decorators)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            annotation = ast.unparse(item.annotation)
            if "ClassVar" not in annotation and not _is_init_false(item.value):
                info.fields.append(item.target.id)
    return info


def _absolute(module: str, is_package: bool, level: int, name: Optional[str]) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _top_level_statements(tree: ast.Module):
    """Module-level statements, looking inside ``try``/``if`` blocks (optional imports, TYPE_CHECKING aside)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.Try):
            stack[:0] = node.body + [s for h in node.handlers for s in h.body] + node.orelse
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                stack[:0] = node.body + node.orelse
        else:
            yield node


def module_defs(source: str, path: str) -> ModuleDefs:
    """The public callables and imports of one module (a module that does not parse yields nothing)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ModuleDefs()
    module, is_package = module_name(path), path.endswith("__init__.py")
    defs = ModuleDefs()
    statements = list(_top_level_statements(tree))
    for node in statements:
        if isinstance(node, ast.ImportFrom):
            source_module = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                if alias.name != "*":
                    defs.imports[alias.asname or alias.name] = f"{source_module}.{alias.name}"
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY_ATTRS"
                                                  for t in node.targets):
            defs.imports.update(_lazy_attrs(node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == "_LAZY_ATTRS" and node.value is not None:
            defs.imports.update(_lazy_attrs(node.value))

    def resolve(name: str) -> str:
        head, _, rest = name.partition(".")
        if head in defs.imports:
            qualified = defs.imports[head] + (f".{rest}" if rest else "")
        elif any(isinstance(n, ast.ClassDef) and n.name == head for n in statements):
            qualified = f"{module}.{name}"
        else:
            return "?"
        return qualified if qualified.startswith("nemo_automodel.") else "?"

    for node in statements:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id.lstrip("_") == "STRATEGY_MAP" \
                and isinstance(node.value, ast.Dict):  # parse_distributed_section's strategy -> config class
            defs.strategy_map = {k.value: resolve(v.id) for k, v in zip(node.value.keys, node.value.values)
                                 if isinstance(k, ast.Constant) and isinstance(v, ast.Name)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            defs.functions[node.name] = _keywords(node, drop_first=False)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            defs.classes[node.name] = _class_info(node, resolve)
    return defs


def _lazy_attrs(value: ast.expr) -> dict[str, str]:
    """A package's ``_LAZY_ATTRS = {"Name": ("module", "attr")}``: names it exports through ``__getattr__``."""
    out = {}
    if isinstance(value, ast.Dict):
        for key, item in zip(value.keys, value.values):
            if isinstance(key, ast.Constant) and isinstance(item, ast.Tuple) and len(item.elts) == 2 \
                    and all(isinstance(e, ast.Constant) for e in item.elts):
                out[key.value] = f"{item.elts[0].value}.{item.elts[1].value}"
    return out


def _root(node: ast.expr) -> bool:
    """``self.cfg`` (``self._raw`` in the typed recipe config) or a bare ``cfg``/``config``: the root config."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("cfg", "_raw") and isinstance(node.value, ast.Name) and node.value.id == "self"
    return isinstance(node, ast.Name) and node.id in ROOT_CONFIG_NAMES


def _first(text) -> Optional[str]:
    if isinstance(text, ast.Constant) and isinstance(text.value, str) and text.value:
        head = text.value.split(".")[0]
        return head if head.isidentifier() and not head.startswith("_") else None
    return None


def config_node_api(loader_source: str) -> set[str]:
    """The attributes of AutoModel's ``ConfigNode`` itself (``to_dict``, ``raw_config``, ...): not sections."""
    try:
        tree = ast.parse(loader_source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ConfigNode":
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                    names.add(item.attr)
    return names


def recipe_sections(source: str, api: frozenset[str] = frozenset()) -> set[str]:
    """The top-level sections a recipe module reads from its root config (``api``: ConfigNode's own names)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found: set[str] = set()
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _root(node.func.value) \
                and (node.func.attr == "get" or (node.func.attr == "pop" and isinstance(node.func.value, ast.Name)
                                                 and node.func.value.id == CLI_CONFIG_NAME)) and node.args:
            name = _first(node.args[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("hasattr", "getattr") and len(node.args) >= 2 and _root(node.args[0]):
            name = _first(node.args[1])
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and _root(node.comparators[0]):
            name = _first(node.left)
        elif isinstance(node, ast.Attribute) and _root(node.value) and id(node) not in called \
                and not node.attr.startswith("_"):
            name = node.attr
        if name and name not in api:
            found.add(name)
    for node in ast.walk(tree):  # `for k in filter(lambda x: x.startswith("validation_dataset"), cfg...)`
        if isinstance(node, (ast.For, ast.comprehension)) and any(_root(n) for n in ast.walk(node.iter)):
            scope = [node.iter] + (node.body if isinstance(node, ast.For) else node.ifs)
            for part in scope:
                for call in ast.walk(part):
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                            and call.func.attr == "startswith" and call.args and _first(call.args[0]):
                        found.add(call.args[0].value + "*")  # every block whose name starts so is read
    return found
