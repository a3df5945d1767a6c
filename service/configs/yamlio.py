"""Safe YAML with the position of every key, and command-line overrides.

A config from a user or a pull request is data. Loading it:

1. refuses oversize, binary and non-UTF-8 input before parsing;
2. bounds nesting depth, aliases, event count and alias expansion before
   anything is built (``trainer/contract/yaml_limits.py``: the trainer's own loader
   reads files under the same limits);
3. builds plain objects itself from the composed nodes, in time linear in
   the document, refusing tags other than plain data and integers beyond 64
   bits (no config key needs one, Python cannot even print one of more than
   4,300 digits, and the rules multiply sizes together);
4. records ``dotted.key -> (line, column)`` (1-based) for findings, and the
   keys written twice.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from trainer.contract.dotted import NotASection, with_dotted
from trainer.contract.overrides import (
    BARE_FLOAT,  # YAML 1.1 reads `1e-4` as a string; authors mean a float
    ConfigError,
    coerce_value,
)
from trainer.contract.overrides import parse_overrides as trainer_parse_overrides
from trainer.contract.yaml_limits import FAST_LOADER as _Loader
from trainer.contract.yaml_limits import (  # noqa: F401 - MAX_* and decode are this module's public API too
    INT_TAG,
    MAX_ALIASES,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_NODES,
    MERGE_TAG,
    PLAIN_TAGS,
    STR_TAG,
    TIMESTAMP_TAG,
    YamlError,
    compose_within_limits,
    decode,
    expansion_error,
    integer,
    mark,
    syntax_error,
    tag_error,
)


@dataclass
class Document:
    data: dict
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    duplicates: list[tuple[str, int, int]] = field(default_factory=list)
    path: str = "<string>"
    # A dialect's sections as its file writes them (a Megatron Bridge `peft:`), for the rules that judge a
    # dialect's own names; `data` is the dialect read into this product's format.
    dialect_sections: dict = field(default_factory=dict)

    def position(self, key: Optional[str]) -> tuple[Optional[int], Optional[int]]:
        """Line/column of a dotted key, else of its nearest present parent."""
        while key:
            if key in self.positions:
                return self.positions[key]
            # A list element (`peft.target_modules[1]`) without a position of its own: its list's.
            key = key[:key.rindex("[")] if key.endswith("]") else key.rpartition(".")[0]
        return (None, None)


try:  # libyaml: the same data several times faster (a tune builds a dozen configs)
    from yaml import CSafeDumper as _CopyDumper
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeDumper as _CopyDumper


def plain_copy(data: Any) -> Any:
    """A deep copy made of what YAML keeps: plain dicts (keys sorted, as ``yaml.safe_dump`` sorts them), lists
    and scalars; the same data as ``yaml.safe_load(yaml.safe_dump(data))``, through libyaml where installed."""
    return yaml.load(yaml.dump(data, Dumper=_CopyDumper), Loader=_Loader)


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


def _subject(key_path: str, is_key: bool) -> str:
    """How an error names the value it is about: the dotted key, or the mapping a bad key is in."""
    if is_key:
        return f"a key of `{key_path}`" if key_path else "a top-level key"
    return f"`{key_path}`" if key_path else "the value"


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
            raise expansion_error(node, self.path)
        if node.tag not in PLAIN_TAGS:
            raise tag_error(node, self.path)
        if isinstance(node, ScalarNode):
            if node.tag == MERGE_TAG:  # `<<` as a value (as a key, _mapping merges it)
                raise tag_error(node, self.path)
            if node.tag == TIMESTAMP_TAG:
                return node.value  # dates stay the text the author wrote
            if node.tag == STR_TAG and not node.style and BARE_FLOAT.match(node.value):
                return float(node.value)
            if node.tag == INT_TAG:
                return integer(node, _subject(key_path, is_key), self.path, self.scalars)
            try:
                return self.scalars.construct_object(node)
            except ConstructorError as exc:
                line, col = mark(node.start_mark)
                raise YamlError(f"unsupported YAML value: {exc.problem}", path=self.path, line=line,
                                column=col, fix="use plain YAML scalars; tags like !!python/* are refused")
        if isinstance(node, SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.positions[f"{key_path}[{i}]"] = mark(item.start_mark)  # where a finding on it points
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
        keys = _MappingKeys()
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                parts = self.build(value_node, key_path)
                for part in parts if isinstance(parts, list) else [parts]:
                    if isinstance(part, dict):
                        for k, v in part.items():
                            if k not in keys.stored:  # an explicit key wins, and of merged ones the first
                                result.setdefault(k, v)
                continue
            key = self.build(key_node, key_path, is_key=True)
            line, col = mark(key_node.start_mark)
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
            identity = (key_node.tag, key)
            stored = keys.store_as(identity, name, result)
            if stored is None:
                self.duplicates.append((child, line, col))
                stored = keys.written[identity]
            self.positions[child] = (line, col)
            result[stored] = self.build(value_node, child)
        return result


class _MappingKeys:
    """The explicit keys of one mapping and the result key each is stored under, each key in O(1)
    (a scan of the keys written so far made a mapping of N keys cost N**2)."""

    def __init__(self) -> None:
        self.written: dict[tuple[str, Any], Any] = {}  # (tag, value) of each explicit key -> its result key
        self.holders: dict[str, tuple[str, Any]] = {}  # a name -> the first key stored under it
        self.stored: set = set()  # every result key an explicit key is stored under (merged keys yield)

    def store_as(self, identity: tuple[str, Any], name: str, result: dict) -> Any:
        """The dict key for an explicit mapping key, None when the same key was written before. Keys
        are names, except that a number sharing its text with a text key keeps its type (moved there
        should the text key come second)."""
        if identity in self.written:
            return None
        key = identity[1]
        holder = self.holders.get(name)
        if holder is None:
            self.written[identity] = name
            self.holders[name] = identity
        elif isinstance(key, str):  # the number that holds this name gives it up
            self.written[holder] = holder[1]
            self.stored.add(holder[1])
            result[holder[1]] = result.pop(name)
            self.written[identity] = name
            if not isinstance(holder[1], str):  # a date's text still holds the name, and came first
                self.holders[name] = identity
        else:
            self.written[identity] = key
        self.stored.add(self.written[identity])
        return self.written[identity]


def load_yaml(text: str, path: str = "<string>") -> Document:
    """Parse one config document. Raises YamlError for anything that is not a usable mapping."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlError(f"document is over the {MAX_BYTES:,}-byte limit for a config", path=path)
    if not text.strip():
        raise YamlError("file is empty", path=path, fix="a config needs at least a `model` section")
    try:
        node = compose_within_limits(text, path, _Loader)
    except yaml.YAMLError as exc:
        raise syntax_error(exc, path, text) from None
    if node is None:
        raise YamlError("file holds no YAML document (only comments?)", path=path,
                        fix="a config needs at least a `model` section")
    if not isinstance(node, MappingNode):
        line, col = mark(node.start_mark)
        kind = "a list" if isinstance(node, SequenceNode) else "a single value"
        raise YamlError(f"top level is {kind}, not a mapping of sections", path=path, line=line, column=col,
                        fix="start the file with sections such as `model:` and `step_scheduler:`")
    builder = _Builder(path)
    data = builder.build(node)
    return Document(data=data, positions=builder.positions, duplicates=builder.duplicates, path=path)


class OverrideError(ValueError):
    pass


MAX_OVERRIDE_CHARS = 10_000


def parse_overrides(argv: list[str]) -> list[tuple[str, Any]]:
    """``--a.b v`` and ``--a.b=v`` pairs split as the trainer splits them (one parser,
    trainer/contract/overrides.py), each value typed as YAML under this module's limits."""
    try:
        return trainer_parse_overrides(argv, coerce=_coerce)
    except ConfigError as err:
        raise OverrideError(str(err)) from None


def override_pairs(values: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A JSON object of overrides (``POST /v1/recommend``) as the pairs ``parse_overrides`` makes of the
    command line's, in the order given: a string is typed as the same text on the command line would be
    (``"{schedule: constant}"`` is a mapping, ``"1e-4"`` a float), any other JSON value as its JSON text
    (``true``, ``0.0001``, ``null``), so both doors make the same config of the same words. The keys are
    dotted keys already (the API's schema checks them)."""
    pairs = []
    for key, value in values.items():
        try:
            pairs.append((key, _coerce(value if isinstance(value, str) else json.dumps(value))))
        except ValueError as err:  # the limits, a tag other than plain data: as parse_overrides words it
            raise OverrideError(f"override --{key}: {err}") from None
    return pairs


def _coerce(raw: str) -> Any:
    """A value typed as the trainer types it, under the same limits as a whole config (the trainer's
    ``coerce_value`` applies them): an override comes from a client as much as a posted file does.
    The trainer's loader reads a bare ``3e-3`` inside a section (``--optimizer "{lr: 3e-3}"``) as the
    float a file's ``lr: 3e-3`` is, so the change list compares 0.003 with 0.003."""
    if len(raw) > MAX_OVERRIDE_CHARS:
        raise OverrideError(f"value is over {MAX_OVERRIDE_CHARS:,} characters")
    return coerce_value(raw)


def with_overrides(data: dict, pairs: Iterable[tuple[str, Any]]) -> dict:
    """A deep copy of ``data`` with the override pairs set in order (missing sections are created). The
    values are copied too: the same pairs apply more than once (to the recipe for the plan, then to the
    planned config), and a config must share no object with another or with the request."""
    try:
        return with_dotted(data, [(key, copy.deepcopy(value)) for key, value in pairs])
    except NotASection as err:
        raise OverrideError(f"cannot set --{err.key}: {err.prefix} is a {type(err.value).__name__}, "
                            "not a section") from None


def apply_overrides(data: dict, argv: list[str]) -> dict:
    """A deep copy of ``data`` with ``--a.b v`` overrides applied (missing sections are created)."""
    return with_overrides(data, parse_overrides(argv))
