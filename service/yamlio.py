"""Safe YAML with the position of every key, and command-line overrides.

A config from a user or a pull request is data. Loading it:

1. refuses oversize, binary and non-UTF-8 input before parsing;
2. walks the event stream once (iteratively, so depth cannot blow the stack)
   to bound nesting depth, anchors/aliases and event count;
3. composes nodes with the safe loader (no python tags) and builds plain
   objects itself, counting every node it builds so an alias bomb stops at a
   fixed budget instead of exhausting memory;
4. refuses integers beyond 64 bits: no config key needs one, Python cannot even print one of more
   than 4,300 digits, and the rules multiply sizes together;
5. records ``dotted.key -> (line, column)`` (1-based) for findings.
"""

from __future__ import annotations

import os
import stat
import sys

from dataclasses import dataclass, field
from typing import Any, Optional

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from trainer.dotted import NotASection, with_dotted
from trainer.overrides import BARE_FLOAT  # YAML 1.1 reads `1e-4` as a string; authors mean a float
from trainer.overrides import ConfigError, coerce_value
from trainer.overrides import parse_overrides as trainer_parse_overrides

try:  # libyaml is several times faster and keeps marks
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as _Loader

MAX_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 200
MAX_EVENTS = 200_000
MAX_NODES = 200_000

MERGE_TAG = "tag:yaml.org,2002:merge"
ALLOWED_TAGS = frozenset(
    "tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "merge")
)
STR_TAG = "tag:yaml.org,2002:str"
INT_TAG = "tag:yaml.org,2002:int"
# Seeds are uint64 (torch.manual_seed), every count and size is far smaller. An integer written with
# more characters than this is refused from its text, before Python converts it (digit limit, cost).
INTEGER_LIMIT = 1 << 64
MAX_INTEGER_CHARS = 256
TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class YamlError(ValueError):
    """Unusable input: the file cannot be read as a config at all."""

    def __init__(self, message: str, *, path: str = "<string>", line: Optional[int] = None,
                 column: Optional[int] = None, fix: Optional[str] = None):
        self.path, self.line, self.column, self.fix = path, line, column, fix
        self.reason = message
        where = path if line is None else f"{path}:{line}:{column or 1}"
        super().__init__(f"{where}: {message}" + (f" (fix: {fix})" if fix else ""))


@dataclass
class Document:
    data: dict
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    duplicates: list[tuple[str, int, int]] = field(default_factory=list)
    path: str = "<string>"

    def position(self, key: Optional[str]) -> tuple[Optional[int], Optional[int]]:
        """Line/column of a dotted key, else of its nearest present parent."""
        while key:
            if key in self.positions:
                return self.positions[key]
            # A list element (`peft.target_modules[1]`) without a position of its own: its list's.
            key = key[:key.rindex("[")] if key.endswith("]") else key.rpartition(".")[0]
        return (None, None)


def decode(raw: bytes, path: str, max_bytes: int = MAX_BYTES) -> str:
    if len(raw) > max_bytes:
        # Callers read at most one byte past the limit, so the true size is not known here.
        raise YamlError(f"file is over the {max_bytes:,}-byte limit for a config",
                        path=path, fix="split the file or remove embedded data; configs are small")
    if b"\x00" in raw[:8192]:
        raise YamlError("file looks binary (NUL bytes), not a YAML config", path=path,
                        fix="pass a .yaml text file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlError(f"file is not UTF-8 text (byte {exc.start})", path=path,
                        fix="save the file as UTF-8") from None


def not_regular_file(path: str) -> Optional[str]:
    """What the path is when it is not a regular file (None for a file or a missing path, which
    ``open`` reports): opening a FIFO blocks until a writer comes, and a device or socket is no
    config, so these are refused from ``stat`` before any open."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a file"


def read_file(path: str, max_bytes: int = MAX_BYTES) -> str:
    """Read a config file without ever holding more than the limit in memory. Anything but a regular
    file (a FIFO would block the open until a writer comes) is refused before it is opened."""
    kind = not_regular_file(path)
    if kind is not None:
        raise YamlError(f"not a regular file: {kind}", path=path, fix="pass the path of a YAML config file")
    with open(path, "rb") as fh:
        raw = fh.read(max_bytes + 1)
    return decode(raw, path, max_bytes)


def read_stdin(max_bytes: int = MAX_BYTES) -> str:
    """The config piped in, under the same limit as a file: read no further than it ("over the limit"
    is all that is known), as ``<stdin>`` in messages."""
    return decode(sys.stdin.buffer.read(max_bytes + 1), "<stdin>", max_bytes)


def _mark(mark) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1)


def _scan_limits(text: str, path: str) -> None:
    try:
        _stream_within_limits(text, path)
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, path) from None


def _stream_within_limits(text: str, path: str) -> None:
    """Bound depth, aliases and size on the event stream (no recursion, nothing built yet).
    YamlError for a limit; a YAML syntax error propagates as PyYAML raised it."""
    depth = aliases = events = 0
    for event in yaml.parse(text, Loader=_Loader):
        events += 1
        if events > MAX_EVENTS:
            raise YamlError(f"more than {MAX_EVENTS:,} YAML events", path=path,
                            fix="a config is a few hundred keys; remove generated data")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line, col = _mark(event.start_mark)
                raise YamlError(f"nesting deeper than {MAX_DEPTH} levels", path=path, line=line,
                                column=col, fix="flatten the structure")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                line, col = _mark(event.start_mark)
                raise YamlError(f"more than {MAX_ALIASES} aliases", path=path, line=line, column=col,
                                fix="write the values out instead of using many *aliases")


def _written_digits(text: str) -> int:
    """Significant digits of a YAML 1.1 integer as written: no sign, radix prefix, `_`, sexagesimal `:`
    or leading zeros."""
    body = text.lstrip("+-")
    if body[:2].lower() in ("0x", "0b"):
        body = body[2:]
    return len("".join(ch for ch in body if ch not in "_:").lstrip("0"))


def _integer(node: ScalarNode, subject: str, path: str, constructor: SafeConstructor) -> int:
    """The value of an int-tagged scalar, or a YamlError at its position when it is beyond 64 bits."""
    value, digits = None, _written_digits(node.value)
    if len(node.value) <= MAX_INTEGER_CHARS:
        try:
            value = constructor.construct_object(node)
        except ValueError:  # Python's int digit limit, should a build lower it; or `!!int abc`
            value = None
    line, col = _mark(node.start_mark)
    if value is None and digits <= len(str(INTEGER_LIMIT)) and not node.value.strip("+-0_:xXbB").isdigit():
        raise YamlError(f"{subject} is tagged as an integer but {node.value[:40]!r} is not one", path=path,
                        line=line, column=col, fix="write a number, or drop the !!int tag")
    if value is None or abs(value) >= INTEGER_LIMIT:
        padded = len(node.value) > MAX_INTEGER_CHARS and digits <= len(str(INTEGER_LIMIT))
        # short in value, but padded out beyond what is read
        size = f"{len(node.value):,} characters" if padded else f"{digits:,} digits"
        raise YamlError(f"{subject} is an integer with {size}; configs hold "
                        "small integers (counts, sizes, seeds: at most 64 bits)", path=path, line=line,
                        column=col, fix="write the intended number (e.g. 8), or quote it if it is text")
    return value


def _subject(key_path: str, is_key: bool) -> str:
    """How an error names the value it is about: the dotted key, or the mapping a bad key is in."""
    if is_key:
        return f"a key of `{key_path}`" if key_path else "a top-level key"
    return f"`{key_path}`" if key_path else "the value"


def _syntax_error(exc: yaml.YAMLError, path: str) -> YamlError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    line, col = _mark(mark) if mark is not None else (None, None)
    return YamlError(f"YAML syntax error: {problem}", path=path, line=line, column=col,
                     fix="check indentation, colons and quotes at that line")


class _Builder:
    """Builds plain Python objects from composed nodes, with positions and a node budget."""

    def __init__(self, path: str):
        self.path = path
        self.nodes = 0
        self.positions: dict[str, tuple[int, int]] = {}
        self.duplicates: list[tuple[str, int, int]] = []
        self.scalars = SafeConstructor()

    def build(self, node: Node, key_path: str = "", is_key: bool = False) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            line, col = _mark(node.start_mark)
            raise YamlError(f"expands to more than {MAX_NODES:,} values (alias expansion)", path=self.path,
                            line=line, column=col, fix="remove the nested *aliases")
        if node.tag not in ALLOWED_TAGS and node.tag != TIMESTAMP_TAG:
            line, col = _mark(node.start_mark)
            raise YamlError(f"YAML tag {node.tag!r} is not allowed in a config", path=self.path, line=line,
                            column=col, fix="remove the tag; configs hold plain data only")
        if isinstance(node, ScalarNode):
            if node.tag == TIMESTAMP_TAG:
                return node.value  # dates stay the text the author wrote
            if node.tag == STR_TAG and not node.style and BARE_FLOAT.match(node.value):
                return float(node.value)
            if node.tag == INT_TAG:
                return _integer(node, _subject(key_path, is_key), self.path, self.scalars)
            try:
                return self.scalars.construct_object(node)
            except ConstructorError as exc:
                line, col = _mark(node.start_mark)
                raise YamlError(f"unsupported YAML value: {exc.problem}", path=self.path, line=line,
                                column=col, fix="use plain YAML scalars; tags like !!python/* are refused")
        if isinstance(node, SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.positions[f"{key_path}[{i}]"] = _mark(item.start_mark)  # where a finding on it points
                items.append(self.build(item, f"{key_path}[{i}]"))
            return items
        if isinstance(node, MappingNode):
            return self._mapping(node, key_path)
        raise YamlError(f"unsupported YAML node {node.tag}", path=self.path)  # pragma: no cover

    def _mapping(self, node: MappingNode, key_path: str) -> dict:
        """A mapping's keys as names (``str``). Keys written explicitly override merged ones (``<<``)
        wherever the merge stands, as YAML specifies, so only a key written twice explicitly is a
        duplicate. A key's identity is its YAML tag and value: ``1`` and ``"1"`` are two keys; should a
        mapping hold both, the number keeps its type so neither value is lost."""
        result: dict = {}
        written: dict[tuple[str, Any], Any] = {}  # (tag, value) of each explicit key -> where it is stored
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                parts = self.build(value_node, key_path)
                stored = set(written.values())
                for part in parts if isinstance(parts, list) else [parts]:
                    if isinstance(part, dict):
                        for k, v in part.items():
                            if k not in stored:  # an explicit key wins, and of merged ones the first
                                result.setdefault(k, v)
                continue
            key = self.build(key_node, key_path, is_key=True)
            line, col = _mark(key_node.start_mark)
            if key is None:
                if key_node.value:
                    reason, fix = (f"a null key: `{key_node.value}` reads as YAML null, not as a name",
                                   f'quote it ("{key_node.value}") if the word is meant, or rename the key')
                else:
                    reason, fix = "a null key: the key is empty", "give the key a name"
                raise YamlError(reason, path=self.path, line=line, column=col, fix=fix)
            if not isinstance(key, (str, int, float, bool)):
                kind = "a list" if isinstance(key, list) else "a mapping"
                raise YamlError(f"a mapping key is {kind}; keys must be plain scalars (names or numbers)",
                                path=self.path, line=line, column=col, fix="use a plain name as the key")
            name = str(key)
            child = f"{key_path}.{name}" if key_path else name
            stored = self._store_as(written, (key_node.tag, key), name, result)
            if stored is None:
                self.duplicates.append((child, line, col))
                stored = written[(key_node.tag, key)]
            self.positions[child] = (line, col)
            result[stored] = self.build(value_node, child)
        return result

    @staticmethod
    def _store_as(written: dict, identity: tuple[str, Any], name: str, result: dict) -> Any:
        """The dict key for an explicit mapping key, None when the same key was written before. Keys
        are names, except that a number sharing its text with a text key keeps its type (moved there
        should the text key come second)."""
        if identity in written:
            return None
        tag, key = identity
        holder = next((other for other, where in written.items() if where == name), None)
        if holder is None:
            written[identity] = name
        elif isinstance(key, str):  # the number that holds this name gives it up
            written[holder] = holder[1]
            result[holder[1]] = result.pop(name)
            written[identity] = name
        else:
            written[identity] = key
        return written[identity]


def _check_expansion(root: Node, path: str) -> None:
    """Refuse an alias bomb or a recursive alias before building it.

    Counts values after alias expansion, memoised per node so the count itself costs only the size
    of the file. A node still being counted (its ``(node, True)`` entry is on the stack, so it is on
    the path from the root) that turns up again as a child is a cycle such as ``a: &a [*a]``: the
    composer links the alias back to its own anchor, and expanding it would never end.
    """
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, ScalarNode):
            sizes[id(node)] = 1
            continue
        if not children_done and id(node) in in_progress:
            line, col = _mark(node.start_mark)
            raise YamlError("recursive alias: the anchored value contains an alias to itself", path=path,
                            line=line, column=col, fix="write the value out; an *alias cannot refer to "
                            "the &anchor that encloses it")
        children = [c for pair in node.value for c in pair] if isinstance(node, MappingNode) else node.value
        if children_done:
            in_progress.discard(id(node))
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[id(node)] = total
            if total > MAX_NODES:
                line, col = _mark(node.start_mark)
                raise YamlError(f"expands to more than {MAX_NODES:,} values (alias expansion)", path=path,
                                line=line, column=col, fix="remove the nested *aliases")
        else:
            in_progress.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)


def load_yaml(text: str, path: str = "<string>") -> Document:
    """Parse one config document. Raises YamlError for anything that is not a usable mapping."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlError(f"document is over the {MAX_BYTES:,}-byte limit for a config", path=path)
    if not text.strip():
        raise YamlError("file is empty", path=path, fix="a config needs at least a `model` section")
    _scan_limits(text, path)
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, path) from None
    if node is None:
        raise YamlError("file holds no YAML document (only comments?)", path=path,
                        fix="a config needs at least a `model` section")
    if not isinstance(node, MappingNode):
        line, col = _mark(node.start_mark)
        kind = "a list" if isinstance(node, SequenceNode) else "a single value"
        raise YamlError(f"top level is {kind}, not a mapping of sections", path=path, line=line, column=col,
                        fix="start the file with sections such as `model:` and `step_scheduler:`")
    _check_expansion(node, path)
    builder = _Builder(path)
    data = builder.build(node)
    return Document(data=data, positions=builder.positions, duplicates=builder.duplicates, path=path)


class OverrideError(ValueError):
    pass


MAX_OVERRIDE_CHARS = 10_000


def parse_overrides(argv: list[str]) -> list[tuple[str, Any]]:
    """``--a.b v`` and ``--a.b=v`` pairs split as the trainer splits them (one parser,
    trainer/overrides.py), each value typed as YAML under this module's limits."""
    try:
        return trainer_parse_overrides(argv, coerce=_coerce)
    except ConfigError as err:
        raise OverrideError(str(err)) from None


def _coerce(raw: str) -> Any:
    """A value typed as the trainer types it, after the same size and alias-expansion limits as a
    whole config: an override comes from a client as much as a posted file does."""
    if len(raw) > MAX_OVERRIDE_CHARS:
        raise OverrideError(f"value is over {MAX_OVERRIDE_CHARS:,} characters")
    try:
        _stream_within_limits(raw, "override")  # nesting first: deep values recurse when built or dumped
        node = yaml.compose(raw, Loader=_Loader)
        if node is not None:
            _check_expansion(node, "override")
            _check_integers(node, "override")
    except yaml.YAMLError:
        pass  # not YAML: coerce_value keeps the string given
    except YamlError as err:
        raise OverrideError(f"{err.reason}; {err.fix}") from None  # parse_overrides names the flag
    return coerce_value(raw, loader=_Loader)


def _check_integers(root: Node, path: str) -> None:
    """Every int-tagged scalar under ``root`` within 64 bits (after ``_check_expansion`` bounded its size)."""
    constructor, seen, stack = SafeConstructor(), set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ScalarNode):
            if node.tag == INT_TAG:
                _integer(node, "the value", path, constructor)
        elif isinstance(node, MappingNode):
            stack.extend(c for pair in node.value for c in pair)
        else:
            stack.extend(node.value)


def apply_overrides(data: dict, argv: list[str]) -> dict:
    """A deep copy of ``data`` with ``--a.b v`` overrides applied (missing sections are created)."""
    try:
        return with_dotted(data, parse_overrides(argv))
    except NotASection as err:
        raise OverrideError(f"cannot set --{err.key}: {err.prefix} is a {type(err.value).__name__}, "
                            "not a section") from None
