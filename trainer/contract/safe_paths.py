"""Writing in ``checkpoint_dir`` without following symbolic links.

A checkpoint folder may be shared or prepared by someone else: a ``.writer.lock`` or ``training.jsonl.tmp``
there that is a link to another file would have the trainer truncate or overwrite that file. So every file
the trainer writes is opened with ``O_NOFOLLOW`` (a link in its place is refused, never followed), the files of
a checkpoint are written into a staging folder this run has just created, and a ``checkpoint_dir`` holding a
link that leads out of it is refused at start-up (:func:`check_links_stay_inside`), naming the link.

Files are created with mode 0666 less the umask, as ``open`` creates them: people share checkpoints.
Standard library and ConfigError only (torch-free): the launcher's pre-flight runs the same checks.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import IO

from trainer.contract.overrides import ConfigError

NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MODES = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "r+": os.O_RDWR | os.O_CREAT, "r": os.O_RDONLY}
MAX_SCANNED_ENTRIES = 100_000  # a folder with more is scanned this far: the trainer's own layout is far smaller


class LinkRefused(ConfigError):
    """A file the trainer would write, or an entry of ``checkpoint_dir``, is a link it will not follow."""


def link_refusal(path: Path, where: str = "") -> LinkRefused:
    target = os.readlink(path) if os.path.islink(path) else "?"
    return LinkRefused(f"checkpoint.checkpoint_dir: {path} is a symbolic link (to {target}){where}; the trainer "
                       "never writes through links. Remove the link, or give the run another checkpoint_dir")


def open_no_follow(path: Path, mode: str = "w", binary: bool = False) -> IO:
    """``open(path, mode)`` that refuses a symbolic link at ``path`` (LinkRefused) instead of following it.
    Modes: w, a, r+ (created if absent, not truncated), r."""
    try:
        fd = os.open(path, _MODES[mode] | NO_FOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP or os.path.islink(path):
            raise link_refusal(Path(path)) from None
        raise
    return os.fdopen(fd, mode + ("b" if binary else ""), **({} if binary else {"encoding": "utf-8"}))


def write_text_no_follow(path: Path, text: str) -> None:
    with open_no_follow(path, "w") as fh:
        fh.write(text)


def copy_no_follow(source: Path, destination: Path) -> None:
    """Copy a file's bytes to ``destination``, refusing a link there."""
    with open(source, "rb") as src, open_no_follow(destination, "w", binary=True) as dst:
        shutil.copyfileobj(src, dst)


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def give_umask_mode(path: Path) -> None:
    """Give a file a writer created private (safetensors writes 0600) the mode ``open`` would have given it. The
    file is one this run just created in its own staging folder."""
    os.chmod(path, 0o666 & ~umask())


def check_links_stay_inside(folder: Path, key: str = "checkpoint.checkpoint_dir") -> None:
    """Refuse a ``folder`` holding a symbolic link (at any depth) that resolves outside it, naming the first.
    Links are not followed while scanning; a folder that does not exist yet holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    root = folder.resolve()
    seen = 0
    for dirpath, dirnames, filenames in os.walk(folder):  # os.walk lists linked folders, never enters them
        for name in sorted(dirnames + filenames):
            seen += 1
            entry = Path(dirpath) / name
            if entry.is_symlink() and not _inside(entry.resolve(), root):
                raise LinkRefused(f"{key}: {entry} is a symbolic link to {os.readlink(entry)}, outside {folder}; "
                                  "the trainer reads and writes this folder's entries, and never outside it. Remove "
                                  "the link, or give the run another checkpoint_dir")
            if seen >= MAX_SCANNED_ENTRIES:
                return


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
