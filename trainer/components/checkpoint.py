"""Checkpoint publication: a checkpoint is staged, then published atomically, and old ones retired.
The layout of ``checkpoint_dir`` and the discovery of complete checkpoints: trainer/contract/checkpoint_layout.py.

Design choice: the model is written once, consolidated (gathered to rank 0), because
that copy is the deliverable and it also restores exactly (fp32 weights round-trip
bit for bit). The optimizer, 2x the model in fp32, is written sharded with
torch.distributed.checkpoint, so no rank ever holds the full optimizer state; DCP
also reshards, so a run may resume on a different data-parallel size.

Publication: everything is written into ``.tmp_epoch_<E>_step_<S>/``; after a barrier
rank 0 fsyncs every file, writes ``.complete``, replaces ``LATEST`` (written to a staging
file and renamed), then renames the folder to its final name (atomic on POSIX) and fsyncs
the parent. A run killed at any point leaves either a complete checkpoint or a ``.tmp_``
folder that discovery ignores and the next run deletes (``LATEST`` may then name the
folder that was never renamed: discovery falls back to the newest complete one).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Optional

from trainer.contract.atomic_files import fsync_path, fsync_tree, remove_staged_files, write_atomic
from trainer.contract.checkpoint_layout import (
    COMPLETE_MARKER,
    LATEST_FILE,
    TMP_PREFIX,
    checkpoint_name,
    is_complete,
    list_published,
)


def _remove(path: Path, ignore_errors: bool = False) -> None:
    """Delete a folder of ours, or the link in its place (never what the link points to)."""
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=ignore_errors)


class CheckpointDir:
    """Rank-0 file operations on ``checkpoint_dir``; callers put barriers around them."""

    def __init__(self, root: Path, keep_last: Optional[int] = None):
        self.root = Path(root)
        self.keep_last = keep_last

    def staging(self, epoch: int, step: int) -> Path:
        return self.root / f"{TMP_PREFIX}{checkpoint_name(epoch, step)}"

    def prepare_staging(self, epoch: int, step: int) -> Path:
        tmp = self.staging(epoch, step)
        _remove(tmp)
        tmp.mkdir(parents=True)  # new, so nothing in it is a link someone left: its files are this run's
        return tmp

    def remove_stale_staging(self) -> list[Path]:
        """Delete ``.tmp_`` folders left by runs that died while saving, and staged ``LATEST`` files."""
        stale = [p for p in self.root.glob(f"{TMP_PREFIX}*") if p.is_dir()] if self.root.is_dir() else []
        for path in stale:
            _remove(path, ignore_errors=True)
        return stale + remove_staged_files(self.root)

    def publish(self, tmp: Path, epoch: int, step: int) -> Path:
        """fsync, mark complete, point LATEST at it, rename into place, apply retention.

        LATEST is written before the rename: a run killed in between (Ctrl-C, SIGKILL) leaves it naming a
        folder that does not exist yet, which ``find_latest`` skips for the newest published checkpoint;
        written after, it would keep naming the previous checkpoint while a newer complete one sat beside it,
        and resume would redo the steps between them."""
        final = self.root / checkpoint_name(epoch, step)
        fsync_tree(tmp)
        # Each file's size, so that a truncated copy is refused before it is loaded (checkpoint_trust).
        sizes = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        write_atomic(tmp / COMPLETE_MARKER, json.dumps({"epoch": epoch, "step": step, "time": time.time(),
                                                        "files": sizes}))
        if final.exists():
            # Re-saving a step (a run restarted from an older checkpoint): retire the old copy first, so that
            # LATEST never names the abandoned run's copy.
            self._retire(final)
        write_atomic(self.root / LATEST_FILE, final.name + "\n")
        tmp.rename(final)
        fsync_path(self.root)
        self.apply_retention(keep=final)
        return final

    def apply_retention(self, keep: Optional[Path] = None) -> list[Path]:
        """Keep the ``keep_last`` complete checkpoints published last (``list_published``), ``keep`` (the
        one just saved) among them whatever the clocks say (:meth:`_retire` deletes the others)."""
        if not self.keep_last:
            return []
        complete = [p for p in list_published(self.root) if p != keep]
        complete += [keep] if keep is not None and is_complete(keep) else []
        doomed = complete[: max(len(complete) - self.keep_last, 0)]
        for path in doomed:
            self._retire(path)
        return doomed

    def _retire(self, path: Path) -> None:
        """Delete a checkpoint so that no kill midway leaves a folder nothing cleans: the marker goes first
        (a half-deleted folder is never taken for a checkpoint), then the folder becomes a ``.tmp_`` one,
        which the next run's ``remove_stale_staging`` deletes should this ``rmtree`` be cut short."""
        retired = self.root / f"{TMP_PREFIX}retired_{path.name}"
        if not path.is_symlink():  # a link's target is not this folder's to change
            (path / COMPLETE_MARKER).unlink(missing_ok=True)
        _remove(retired, ignore_errors=True)
        path.rename(retired)
        _remove(retired, ignore_errors=True)
