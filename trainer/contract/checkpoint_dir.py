"""The checkpoint folder a run writes to: created and probed at start-up (an unusable folder is a config
error before training, not a traceback at the first save), or only checked (``train --dry-run``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from trainer.contract.overrides import ConfigError

FIX = "choose a folder this user can create and write"


def _not_a_file(path: Path, key: str) -> None:
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}: '{path}' is a file, not a folder; {FIX}")


def check_writable_dir(path: Path, key: str = "checkpoint.checkpoint_dir") -> None:
    """Create ``path`` (with its parents) and write a probe file in it: an unusable folder is a config
    error at startup, not a traceback at the first save (or the first metrics line) after training."""
    _not_a_file(path, key)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot create '{path}' ({exc.strerror or exc}); {FIX}") from None
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write_probe_"):
            pass
    except OSError as exc:
        raise ConfigError(f"{key}: cannot write in '{path}' ({exc.strerror or exc}); {FIX}") from None


def check_creatable_dir(path: Path, key: str = "checkpoint.checkpoint_dir") -> None:
    """What :func:`check_writable_dir` checks, without creating anything (``train --dry-run``): the
    folder, or the nearest folder above it that exists, must be a folder this user can write in."""
    _not_a_file(path, key)
    existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    try:  # a probe folder, removed at once: access() says yes to root where mkdir still fails (/proc)
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".write_probe_"))
    except OSError as exc:
        where = "" if existing == path.absolute() else f" (in '{existing}', the nearest folder that exists)"
        raise ConfigError(f"{key}: cannot create or write in '{path}'{where}: {exc.strerror or exc}; {FIX}") from None
