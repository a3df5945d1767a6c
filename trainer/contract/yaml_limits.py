"""The limits every YAML config and override value is read under, for the trainer and the service.

A config is data, and may come from a client: before anything is built it must be bounded in
size, nesting, aliases and alias expansion (a few hundred bytes of nested aliases expand to 10**9
values), and hold plain data only. ``python -m trainer`` (``trainer/contract/overrides.py``) and the
service's loader (``service/configs/yamlio.py``, which adds positions and duplicate keys) share this code,
so ``recipe-advisor train``, ``validate``, the HTTP API and the trainer refuse the same documents.

1. :func:`decode` refuses oversize, binary and non-UTF-8 input before parsing;
2. :func:`compose_within_limits` walks the event stream once (iteratively, so depth cannot blow
   the stack) to bound nesting depth, aliases and event count, composes the nodes, and counts the
   values after alias expansion (memoised per node) before anything is built;
3. :func:`check_plain_data` refuses tags other than plain YAML data and integers beyond 64 bits.

No torch, no service imports: the trainer runs without the service installed.
"""

from __future__ import annotations

from typing import Any, Optional

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode

try:  # libyaml is several times faster and keeps marks
    from yaml import CSafeLoader as FAST_LOADER
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as FAST_LOADER

MAX_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 64
READER_MAX_DEPTH = 1000  # libyaml's reader refuses this much nesting itself, as a syntax error
MAX_ALIASES = 200
MAX_EVENTS = 200_000
MAX_NODES = 200_000
# Real configs hold well under a hundred keys; every key an unknown-key finding may cost a lookup, so a
# document is refused past this many mapping keys in all (counted on the event stream, before composing).
MAX_KEYS = 10_000

YAML_TAG = "tag:yaml.org,2002:"
MERGE_TAG = YAML_TAG + "merge"
STR_TAG = YAML_TAG + "str"
INT_TAG = YAML_TAG + "int"
TIMESTAMP_TAG = YAML_TAG + "timestamp"  # the service keeps a date as the text written
PLAIN_TAGS = frozenset(YAML_TAG + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "merge",
                                              "timestamp"))
# Seeds are uint64 (torch.manual_seed), every count and size is far smaller. An integer written with
# more characters than this is refused from its text, before Python converts it (digit limit, cost).
INTEGER_LIMIT = 1 << 64
MAX_INTEGER_CHARS = 256


class YamlError(ValueError):
    """Unusable input: the file cannot be read as a config at all."""

    def __init__(self, message: str, *, path: str = "<string>", line: Optional[int] = None,
                 column: Optional[int] = None, fix: Optional[str] = None):
        self.path, self.line, self.column, self.fix = path, line, column, fix
        self.reason = message
        where = path if line is None else f"{path}:{line}:{column or 1}"
        super().__init__(f"{where}: {message}" + (f" (fix: {fix})" if fix else ""))


def mark(yaml_mark) -> tuple[int, int]:
    """1-based (line, column) of a PyYAML mark."""
    return (yaml_mark.line + 1, yaml_mark.column + 1)


def decode(raw: bytes, path: str, max_bytes: int = MAX_BYTES) -> str:
    if len(raw) > max_bytes:
        # Callers read at most one byte past the limit, so the true size is not known here.
        raise YamlError(f"file is over the {max_bytes:,}-byte limit for a config",
                        path=path, fix="split the file or remove embedded data; configs are small")
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):  # a UTF-16 byte-order mark: NUL bytes, but text
        raise YamlError("file is UTF-16 text, not UTF-8", path=path, fix="save the file as UTF-8")
    if b"\x00" in raw[:8192]:
        raise YamlError("file looks binary (NUL bytes), not a YAML config", path=path,
                        fix="pass a .yaml text file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlError(f"file is not UTF-8 text (byte {exc.start})", path=path,
                        fix="save the file as UTF-8") from None


def syntax_error(exc: yaml.YAMLError, path: str, text: str = "") -> YamlError:
    where = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    line, col = mark(where) if where is not None else (None, None)
    if "maximum nesting depth" in problem:  # libyaml's reader stops at its own depth, before the MAX_DEPTH check
        return YamlError(f"nesting {READER_MAX_DEPTH:,} or more levels deep (the limit is {MAX_DEPTH})",
                         path=path, line=line, column=col, fix="flatten the structure")
    fix = "check indentation, colons and quotes at that line"
    if "another document" in problem:
        fix = "a config is one YAML document: remove the `---` (and what follows it) at that line"
    elif line is not None and "\t" in _line_of(text, line)[:(col or 1)]:
        fix = "indent with spaces: YAML does not take tabs for indentation"
    return YamlError(f"YAML syntax error: {problem}", path=path, line=line, column=col, fix=fix)


def _line_of(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def compose_within_limits(text: str, path: str, loader: type = FAST_LOADER) -> Optional[Node]:
    """The document's node graph (None for an empty document), once the event stream is within the
    depth, alias and size limits and its alias expansion within :data:`MAX_NODES`. YamlError for a
    limit; a YAML syntax error propagates as PyYAML raised it (an override value that is no YAML
    stays text). ``loader`` resolves the tags (the trainer's reads ``1e-4`` as a float)."""
    _stream_within_limits(text, path)
    node = yaml.compose(text, Loader=loader)
    if node is not None:
        check_expansion(node, path)
    return node


def _stream_within_limits(text: str, path: str) -> None:
    depth = aliases = events = keys = 0
    # per open collection: [is a mapping, nodes written in it so far] (a mapping's even-numbered nodes are keys)
    open_collections: list[list] = []
    for event in yaml.parse(text, Loader=FAST_LOADER):
        events += 1
        if events > MAX_EVENTS:
            raise YamlError(f"more than {MAX_EVENTS:,} YAML events", path=path,
                            fix="a config is a few hundred keys; remove generated data")
        if isinstance(event, yaml.NodeEvent) and open_collections:
            parent = open_collections[-1]
            if parent[0] and parent[1] % 2 == 0:
                keys += 1
                if keys > MAX_KEYS:
                    line, col = mark(event.start_mark)
                    raise YamlError(f"more than {MAX_KEYS:,} keys in one document", path=path, line=line,
                                    column=col, fix="a config is a few hundred keys; remove generated data")
            parent[1] += 1
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            open_collections.append([isinstance(event, yaml.MappingStartEvent), 0])
            depth += 1
            if depth > MAX_DEPTH:
                line, col = mark(event.start_mark)
                raise YamlError(f"nesting deeper than {MAX_DEPTH} levels", path=path, line=line,
                                column=col, fix="flatten the structure")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            open_collections.pop()
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                line, col = mark(event.start_mark)
                raise YamlError(f"more than {MAX_ALIASES} aliases", path=path, line=line, column=col,
                                fix="write the values out instead of using many *aliases")


def expansion_error(node: Node, path: str) -> YamlError:
    line, col = mark(node.start_mark)
    return YamlError(f"expands to more than {MAX_NODES:,} values (alias expansion)", path=path,
                     line=line, column=col, fix="remove the nested *aliases")


def _children(node: Node) -> list[Node]:
    return [c for pair in node.value for c in pair] if isinstance(node, MappingNode) else node.value


def check_expansion(root: Node, path: str) -> None:
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
            line, col = mark(node.start_mark)
            raise YamlError("recursive alias: the anchored value contains an alias to itself", path=path,
                            line=line, column=col, fix="write the value out; an *alias cannot refer to "
                            "the &anchor that encloses it")
        children = _children(node)
        if children_done:
            in_progress.discard(id(node))
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[id(node)] = total
            if total > MAX_NODES:
                raise expansion_error(node, path)
        else:
            in_progress.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)


def short_tag(tag: str) -> str:
    """``tag:yaml.org,2002:binary`` as written: ``!!binary``."""
    return "!!" + tag[len(YAML_TAG):] if tag.startswith(YAML_TAG) else tag


def tag_error(node: Node, path: str) -> YamlError:
    line, col = mark(node.start_mark)
    if isinstance(node, ScalarNode) and not node.style and node.value in ("=", "<<"):
        # YAML 1.1 resolves a bare `=` (!!value) and `<<` (!!merge) itself: the author wrote no tag
        return YamlError(f"a bare {node.value!r}, which YAML 1.1 reads as a special key, not as text", path=path,
                         line=line, column=col, fix=f"quote it ('{node.value}') if it is text")
    return YamlError(f"YAML tag {short_tag(node.tag)} is not allowed in a config", path=path, line=line,
                     column=col, fix="remove the tag; configs hold plain data only")


def _written_digits(text: str) -> int:
    """Significant digits of a YAML 1.1 integer as written: no sign, radix prefix, `_`, sexagesimal `:`
    or leading zeros."""
    body = text.lstrip("+-")
    if body[:2].lower() in ("0x", "0b"):
        body = body[2:]
    return len("".join(ch for ch in body if ch not in "_:").lstrip("0"))


def _refuse_yaml11_reading(text: str, value: int, subject: str, path: str, line: int, col: int,
                           quoted: bool = False) -> None:
    """YAML 1.1 (PyYAML) reads ``0100`` as octal 64 and ``1:30`` as 90 (base 60), where YAML 1.2, JSON and the
    CLI's own ``--global-batch-size 0100`` read 100: a number written so is refused rather than guessed."""
    body = text.lstrip("+-").replace("_", "")
    # a plain `!!int 0100` needs both: ScalarNode does not say whether its tag was written or resolved
    as_text = "drop the !!int tag" if quoted else f"quote it ('{text}'), without a !!int tag,"
    if ":" in body:
        reading, fix = "a base-60 number", f"write {value} if that is meant, or {as_text} if it is text (a time)"
    elif len(body) > 1 and body[0] == "0" and body.isdigit() and int(body, 10) != abs(value):
        decimal = int(text.replace("_", ""), 10)
        reading, fix = "an octal number", (f"write {decimal} (as written) or {value} (octal) without the leading zero, "
                                           f"or {as_text} if it is text (a name, a folder)")
    else:
        return
    raise YamlError(f"{subject} is {text!r}, which YAML 1.1 reads as {reading}: {value}", path=path, line=line,
                    column=col, fix=fix)


def integer(node: ScalarNode, subject: str, path: str, constructor: SafeConstructor) -> int:
    """The value of an int-tagged scalar, or a YamlError at its position when it is beyond 64 bits."""
    value, digits = None, _written_digits(node.value)
    if len(node.value) <= MAX_INTEGER_CHARS:
        try:
            value = constructor.construct_object(node)
        except ValueError:  # Python's int digit limit, should a build lower it; or `!!int abc`
            value = None
    line, col = mark(node.start_mark)
    if value is None and digits <= len(str(INTEGER_LIMIT)) and not (
            node.value.isascii() and node.value.strip("+-0_:xXbB").isdigit()):  # '²'.isdigit() is True
        raise YamlError(f"{subject} is tagged as an integer but {node.value[:40]!r} is not one", path=path,
                        line=line, column=col, fix="write a number, or drop the !!int tag")
    if value is not None and node.tag == INT_TAG:  # `!!int "0100"` is read as octal too
        _refuse_yaml11_reading(node.value, value, subject, path, line, col, quoted=bool(node.style))
    if value is None or abs(value) >= INTEGER_LIMIT:
        padded = len(node.value) > MAX_INTEGER_CHARS and digits <= len(str(INTEGER_LIMIT))
        # short in value, but padded out beyond what is read
        size = f"{len(node.value):,} characters" if padded else f"{digits:,} digits"
        raise YamlError(f"{subject} is an integer with {size}; configs hold "
                        "small integers (counts, sizes, seeds: at most 64 bits)", path=path, line=line,
                        column=col, fix="write the intended number (e.g. 8), or quote it if it is text")
    return value


def check_plain_data(root: Node, path: str, subject: str = "a value") -> None:
    """Every node under ``root`` (bounded by :func:`check_expansion`) plain data, in document order:
    no tag a config refuses (``!!binary``, ``!!set``, ``!!python/...``, ``!custom``) and no integer
    beyond 64 bits. Shared nodes (aliases) are checked once."""
    constructor, seen, stack = SafeConstructor(), set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in PLAIN_TAGS:
            raise tag_error(node, path)
        if isinstance(node, ScalarNode):
            if node.tag == INT_TAG:
                integer(node, subject, path, constructor)
            elif node.tag == MERGE_TAG:  # a `<<` anywhere but as a key (keys are skipped below)
                raise tag_error(node, path)
        elif isinstance(node, MappingNode):  # a `<<` key merges: only its value is data
            stack.extend(reversed([child for key, value in node.value
                                   for child in ((value,) if key.tag == MERGE_TAG else (key, value))]))
        else:
            stack.extend(reversed(_children(node)))


def construct(node: Node, loader: type) -> Any:
    """Build plain objects from a checked node graph with ``loader``'s constructors."""
    builder = loader("")
    try:
        return builder.construct_document(node)
    finally:
        builder.dispose()
