"""One writer per checkpoint folder. Two runs on one ``checkpoint_dir`` race: one's ``keep_last`` deletes the
checkpoint the other is loading. The trainer's rank 0 holds an advisory lock (``flock``) on a file in the folder
for its whole run; the kernel releases it when the process ends, however it ends, so a lock left by a killed run
never blocks. ``recipe-advisor train`` checks it before it starts anything (:func:`check_checkpoint_dir_free`).
The file names the holder (PID and host) for the message; its content means nothing once no one holds it."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import IO, Optional

from trainer.contract.overrides import ConfigError
from trainer.contract.safe_paths import LinkRefused, open_no_follow

LOCK_FILE = ".writer.lock"


def _refusal(folder: Path, handle: IO[str], key: str) -> ConfigError:
    handle.seek(0)
    pid, _, host = handle.read().strip().partition(" ")
    if not pid.isdigit():  # taken, its PID not written yet
        holder, stop = "another process", "stop it"
    elif host and host != socket.gethostname():  # a folder shared between machines
        holder, stop = f"PID {pid} on {host}", "stop it"
    else:
        holder, stop = f"PID {pid}", f"stop it (kill {pid})"
    return ConfigError(f"{key}: '{folder}' is in use by another training run ({holder} holds its lock, "
                       f"{folder / LOCK_FILE}), and two runs in one folder delete each other's checkpoints; wait "
                       f"for that run to end or {stop}, or give this run another {key}")


def hold_checkpoint_dir(folder: Path, key: str = "checkpoint.checkpoint_dir") -> Optional[IO[str]]:
    """Take the folder's lock (the folder exists) and write this process's PID in it. Returns the open file:
    the lock lasts until it is closed or this process ends; None where the file system has no locks (some
    network mounts), and the run goes on unguarded. Raises ConfigError naming the holder."""
    try:  # r+ (created if absent): no truncation before the lock is ours; a link there is refused, not followed
        handle = open_no_follow(folder / LOCK_FILE, "r+")
    except LinkRefused:
        raise
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        refusal = _refusal(folder, handle, key)
        handle.close()
        raise refusal from None
    except OSError:  # ENOLCK, EOPNOTSUPP
        handle.close()
        return None
    handle.truncate(0)
    handle.write(f"{os.getpid()} {socket.gethostname()}\n")
    handle.flush()
    # A forked child (a DataLoader worker) shares the lock through its copy of the file: closed there, so that
    # the lock ends with this process, not with the last of its children.
    os.register_at_fork(after_in_child=handle.close)
    return handle


def check_checkpoint_dir_free(folder: Path, key: str = "checkpoint.checkpoint_dir") -> None:
    """Raise ConfigError naming the holder when a run holds the folder's lock; writes nothing."""
    try:
        handle = open_no_follow(folder / LOCK_FILE, "r")
    except LinkRefused:
        raise
    except OSError:  # none yet (nor the folder): free; unreadable: the writability check says why
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(folder, handle, key) from None
        fcntl.flock(handle, fcntl.LOCK_UN)
