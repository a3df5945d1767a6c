"""Command-line overrides of config keys: ``--optimizer.lr 1e-4`` or ``--optimizer.lr=1e-4``.

The trainer runs without the service installed, so it carries its own small
parser; the service's (``service/configs/yamlio.py``) reuses ``BARE_FLOAT`` and the
dotted-key walk of ``trainer/contract/dotted.py`` from here. Values are coerced the
way YAML would read them (``yaml.safe_load``), with one fix: YAML 1.1 reads
``1e-4`` (no dot) as a string, but every config author means a float.

Also the trainer's YAML loader: safe (plain data only), under the same limits
as the service's (``trainer/contract/yaml_limits.py``: size, nesting, aliases, alias
expansion), with the same float fix, so ``lr: 1e-4`` in a file is a float too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import yaml

from trainer.contract.dotted import NotASection, with_dotted
from trainer.contract.yaml_limits import (
    MAX_BYTES,
    TIMESTAMP_TAG,
    YamlError,
    check_plain_data,
    compose_within_limits,
    construct,
    decode,
    syntax_error,
)

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
    """SafeLoader that reads ``1e-4`` as a float (the limits are :mod:`trainer.contract.yaml_limits`')."""


_TrainerLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(BARE_FLOAT.pattern), list("-+0123456789.")
)
# A date stays the text written, as the service's reader keeps it: `checkpoint_dir: 2024-01-01` is a folder
# name to `validate` and to `train` alike (yaml would build a datetime.date, which no string setting takes).
_TrainerLoader.add_constructor(TIMESTAMP_TAG, lambda loader, node: node.value)


NULL_WORDS = ("null", "~", "none")  # `--key none` sets null (an optional key unset), as in NeMo AutoModel


def coerce_value(text: str, loader: type | None = None) -> Any:
    """Read one override value as YAML would: ``8`` -> 8, ``true`` -> True, ``[1, 2]`` -> list,
    ``none``/``null`` -> None; anything YAML cannot read, or would turn into null by accident
    (an empty value), stays the string given.

    A value is read under the limits of a whole config file (an override comes from a client as much
    as a posted file does): ConfigError for an alias bomb, a recursive alias, deep nesting, an integer
    beyond 64 bits or a tag other than plain data (``!!binary``, ``!!set``), which the config the
    override lands in could not be read back with.
    """
    if BARE_FLOAT.match(text.strip()):
        return float(text)
    if text.strip().lower() in NULL_WORDS:
        return None
    loader = loader or _TrainerLoader
    try:
        node = compose_within_limits(text, "override", loader)
        if node is None:
            return text
        check_plain_data(node, "override", "the value")
        value = construct(node, loader)
    except YamlError as err:
        tagged = err.reason.startswith("YAML tag")
        fix = "write a plain value, or quote it if the `!` is text" if tagged else err.fix
        raise ConfigError(f"{err.reason}; {fix}") from None
    except (yaml.YAMLError, ValueError):  # ValueError: what YAML reads as an impossible date (2024-13-45)
        return text
    return text if value is None else value


def load_yaml_file(path: str | Path) -> dict:
    """Load a config file under the service's limits (:mod:`trainer.contract.yaml_limits`): size, nesting, aliases,
    alias expansion and plain data only. A clear ConfigError for anything that is not a YAML mapping."""
    path = Path(path)
    if not path.is_file():
        if str(path) == "-" or (path.exists() and not path.is_dir()):
            # validate and diff read stdin; every worker of a run reads the file itself, so a pipe
            # (`train <(recommend ... -o -)`) is read once and is gone for the others
            raise ConfigError(f"{path}: train reads its config from a file (each worker reads it); save it first "
                              "(e.g. recipe-advisor recommend ... -o config.yaml)")
        what = "a folder, not a config file; name the YAML file in it" if path.is_dir() else "config file not found"
        raise ConfigError(f"{path}: {what}; pass the path of a YAML config")
    with open(path, "rb") as fh:
        raw = fh.read(MAX_BYTES + 1)
    try:
        text = decode(raw, str(path))
        node = compose_within_limits(text, str(path), _TrainerLoader)
        if node is not None:
            check_plain_data(node, str(path))
        data = None if node is None else construct(node, _TrainerLoader)
    except YamlError as err:
        where = err.path if err.line is None else f"{err.path}: line {err.line}"
        raise ConfigError(f"{where}: {err.reason}" + (f"; {err.fix}" if err.fix else "")) from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(syntax_error(exc, str(path), text))) from None
    except ValueError as exc:  # a date that is no date (2024-13-45)
        raise ConfigError(f"{path}: a value cannot be read ({str(exc).split(':')[0]}); `recipe-advisor validate` "
                          "names the key and line") from None
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
