"""Ways to damage a checkpoint file for the security tests: a pickle that would run a command (an ``os.system``
reduce that creates a marker file), random bytes, a truncated copy; and every place a resume reads."""

from __future__ import annotations

import os
import pickle
import shlex
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional

from trainer.components.checkpoint_trust import load_metadata


class Payload:
    """Unpickled, runs ``touch MARKER``: what a planted checkpoint would make a resume run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def planted_pickle(marker: Path) -> bytes:
    return pickle.dumps(Payload(marker), protocol=2)


class Place(NamedTuple):
    """A file of a checkpoint, or one byte entry (``fqn`` at ``offset``, ``length`` bytes) of a DCP shard."""

    file: Path
    fqn: Optional[str] = None
    offset: int = 0
    length: int = 0

    def __str__(self) -> str:
        return f"{self.file.name}[{self.fqn}]" if self.fqn else self.file.name


def every_file(ckpt: Path) -> list[Place]:
    """Every file of a checkpoint, ``.complete`` included."""
    return [Place(p.relative_to(ckpt)) for p in sorted(ckpt.rglob("*")) if p.is_file()]


def byte_entries(ckpt: Path) -> Iterator[Place]:
    """Each non-tensor entry of each ``.distcp`` shard (what DCP would hand to torch.load)."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    metadata = load_metadata(ckpt / "optim" / ".metadata")
    for index, info in metadata.storage_data.items():
        if isinstance(metadata.state_dict_metadata[index.fqn], BytesStorageMetadata):
            yield Place(Path("optim") / info.relative_path, index.fqn, info.offset, info.length)


def plant(ckpt: Path, place: Place, marker: Path) -> None:
    """Put the planted pickle in ``place``: the whole file, or a byte entry (padded to its length)."""
    path = ckpt / place.file
    payload = planted_pickle(marker)
    if place.fqn is None:
        path.write_bytes(payload)
        return
    assert len(payload) <= place.length, (place, len(payload))
    with open(path, "r+b") as fh:
        fh.seek(place.offset)
        fh.write(payload + b"\0" * (place.length - len(payload)))


@contextmanager
def damaged(ckpt: Path, place: Place, damage: Callable[[Path], None]) -> Iterator[Path]:
    """``ckpt`` with ``damage`` done to one file, restored afterwards (one copy serves every case)."""
    path = ckpt / place.file
    kept = path.read_bytes()
    try:
        damage(path)
        yield path
    finally:
        path.write_bytes(kept)


def randomise(path: Path) -> None:
    path.write_bytes(os.urandom(max(path.stat().st_size, 64)))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])

