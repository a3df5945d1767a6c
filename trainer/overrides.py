"""Command-line overrides of config keys: ``--optimizer.lr 1e-4`` or ``--optimizer.lr=1e-4``.

The trainer runs without the service installed, so it carries its own small
parser; the service's (``service/yamlio.py``) reuses ``BARE_FLOAT`` and the
dotted-key walk of ``trainer/dotted.py`` from here. Values are coerced the
way YAML would read them (``yaml.safe_load``), with one fix: YAML 1.1 reads
``1e-4`` (no dot) as a string, but every config author means a float.

Also the trainer's YAML loader: safe (no python tags), bounded in size and
aliases, with the same float fix, so ``lr: 1e-4`` in a file is a float too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import yaml

from trainer.dotted import NotASection, with_dotted

MAX_CONFIG_BYTES = 2 * 1024 * 1024
MAX_ALIASES = 200

# YAML 1.1 reads `1e-4` (no dot) as a string; every config author means a float.
BARE_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


class ConfigError(ValueError):
    """A config the trainer cannot run. The message names the key or file and how to fix it."""


class FieldError(ConfigError):
    """A bad keyword argument of a ``_target_`` callable; the builder prefixes the section name."""

    def __init__(self, field: str, reason: str):
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


class _TrainerLoader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-4`` as a float and refuses alias bombs."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._open_anchors: set[str] = set()  # anchors whose collection is still being composed

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            mark = self.peek_event().start_mark
            if self._aliases > MAX_ALIASES:
                raise ConfigError(
                    f"line {mark.line + 1}: more than {MAX_ALIASES} YAML aliases; "
                    "write the values out instead of using many *aliases"
                )
            if self.peek_event().anchor in self._open_anchors:
                raise ConfigError(f"line {mark.line + 1}: recursive alias: *{self.peek_event().anchor} is inside "
                                  "its own &anchor; write the value out")
        return super().compose_node(parent, index)

    def _compose_anchored(self, compose, anchor):
        if anchor is None:
            return compose(anchor)
        self._open_anchors.add(anchor)
        try:
            return compose(anchor)
        finally:
            self._open_anchors.discard(anchor)

    def compose_sequence_node(self, anchor):
        return self._compose_anchored(super().compose_sequence_node, anchor)

    def compose_mapping_node(self, anchor):
        return self._compose_anchored(super().compose_mapping_node, anchor)


_TrainerLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(BARE_FLOAT.pattern), list("-+0123456789.")
)


NULL_WORDS = ("null", "~", "none")  # `--key none` clears a key, as in NeMo AutoModel's CLI


def coerce_value(text: str, loader: type | None = None) -> Any:
    """Read one override value as YAML would: ``8`` -> 8, ``true`` -> True, ``[1, 2]`` -> list,
    ``none``/``null`` -> None; anything YAML cannot read, or would turn into null by accident
    (an empty value), stays the string given."""
    if BARE_FLOAT.match(text.strip()):
        return float(text)
    if text.strip().lower() in NULL_WORDS:
        return None
    try:
        value = yaml.load(text, Loader=loader or _TrainerLoader)
    except ConfigError:  # a limit of the loader (recursive alias, alias count): refuse, never a string
        raise
    except (yaml.YAMLError, ValueError):  # ValueError: what YAML reads as an impossible date (2024-13-45)
        return text
    return text if value is None else value


def load_yaml_file(path: str | Path) -> dict:
    """Load a config file safely; a clear ConfigError for anything that is not a YAML mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found; pass the path of a YAML config")
    raw = path.read_bytes()[: MAX_CONFIG_BYTES + 1]
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: over {MAX_CONFIG_BYTES:,} bytes; a config is a few hundred keys")
    if b"\x00" in raw[:8192]:
        raise ConfigError(f"{path}: looks binary (NUL bytes), not a YAML config")
    try:
        data = yaml.load(raw.decode("utf-8-sig"), Loader=_TrainerLoader)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: YAML syntax error: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML error: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ValueError as exc:  # PyYAML's int() past Python's digit limit, or a date that is no date
        why = str(exc).split(":")[0]
        hint = "configs hold small integers; " if "digits" in why else ""
        raise ConfigError(f"{path}: a value cannot be read ({why}); {hint}`recipe-advisor validate` names "
                          "the key and line") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; a config is a YAML mapping of sections")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level is a {type(data).__name__}, not a mapping of sections")
    return data


def parse_overrides(argv: list[str], coerce: Callable[[str], Any] | None = None) -> list[tuple[str, Any]]:
    """``["--a.b", "1", "--c=x"]`` -> ``[("a.b", 1), ("c", "x")]``; a ConfigError for anything else.

    ``coerce`` types each value (default :func:`coerce_value`); the service passes its own, which
    parses with its size and alias limits, so both front ends split arguments the same way.
    """
    coerce = coerce or coerce_value
    pairs: list[tuple[str, Any]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or arg == "--":
            raise ConfigError(
                f"override {arg!r}: expected --section.key VALUE or --section.key=VALUE "
                "(e.g. --optimizer.lr 1e-4)"
            )
        body = arg[2:]
        if "=" in body:
            key, value = body.split("=", 1)
            i += 1
        else:
            key = body
            if i + 1 >= len(argv) or (argv[i + 1].startswith("--") and len(argv[i + 1]) > 2
                                      and not _is_number(argv[i + 1])):
                raise ConfigError(f"override --{key} has no value; write --{key} VALUE or --{key}=VALUE")
            value = argv[i + 1]
            i += 2
        if not _KEY.match(key):
            raise ConfigError(f"override --{key}: not a dotted key like optimizer.lr")
        try:
            typed = coerce(value)
        except ValueError as err:  # the service's limits (OverrideError), a recursive alias
            raise ConfigError(f"override --{key}: {err}") from None
        pairs.append((key, typed))
    return pairs


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def apply_overrides(cfg: dict, argv: list[str]) -> dict:
    """Return a copy of ``cfg`` with ``--a.b v`` / ``--a.b=v`` overrides set (sections created as needed)."""
    pairs = parse_overrides(argv)
    try:
        return with_dotted(cfg, pairs)
    except NotASection as err:
        raise ConfigError(f"override --{err.key}: {err.prefix} is a {type(err.value).__name__} ({err.value!r}), "
                          "not a section") from None
