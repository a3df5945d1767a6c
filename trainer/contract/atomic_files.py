"""Files written whole or not at all: the checkpoint marker and ``LATEST`` (trainer/components/checkpoint.py), and the
config ``recommend -o`` writes (service/cli/recommend.py). Standard library only: the service imports it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

STAGING_SUFFIX = ".staging"  # `.<name>.<pid>.<random>.staging`: what remove_staged_files finds after a kill
# A folder fsync some filesystems refuse (FUSE, network mounts): the rename is done, only its durability unknown.
_FSYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EBADF}


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole or not at all: a full disk or a kill midway leaves the old file (a
    SIGKILL may leave a staging file beside it, which :func:`remove_staged_files` deletes). The staging name is
    unique (a user's ``x.tmp`` beside ``x`` is not ours to overwrite); the new file keeps the old one's
    permission bits, else takes the umask's, as a plain write would. Raises OSError before the old file is
    touched, except where the folder cannot be synced after the rename (then the new file is in place)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}{STAGING_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with open(fd, "w", encoding="utf-8") as fh:  # owns fd from here, closed on any error below
            old = os.stat(path, follow_symlinks=False) if os.path.lexists(path) else None
            if old is not None and stat.S_ISREG(old.st_mode):  # a config kept 0600 stays private (a link: replaced)
                os.chmod(fh.fileno(), old.st_mode & 0o777)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        fsync_path(path.parent)
    except OSError as err:
        if err.errno not in _FSYNC_UNSUPPORTED:
            raise


def remove_staged_files(folder: Path) -> list[Path]:
    """Delete the staging files of writes a kill cut short in ``folder``."""
    stale = [p for p in folder.glob(f".*{STAGING_SUFFIX}") if p.is_file()] if folder.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
