"""Loading a checkpoint runs no code: every file is read as data, and a checkpoint that is not is refused whole.

A checkpoint may come from someone else (a shared folder, a download), so nothing in it may be unpickled
freely. torch.distributed.checkpoint has two doors to arbitrary unpickling, both closed here:

- ``FileSystemReader.read_metadata`` reads ``optim/.metadata`` (and a rank's ``__<r>.metadata``) with plain
  ``pickle.load``. :class:`TrustedFileSystemReader` reads it through :class:`MetadataUnpickler`, which
  admits only the types DCP's metadata is made of (:data:`METADATA_TYPES`) and the torch dtypes;
- ``DefaultLoadPlanner.load_bytes`` calls ``torch.load(weights_only=False)`` on every non-tensor entry of
  the ``.distcp`` shards (the optimizer's ``param_groups``). :class:`TrustedLoadPlanner` loads them with
  ``weights_only=True``.

Tensors in the shards are loaded by DCP itself with ``weights_only=True``; the trainer's own ``.pt`` files
(trainer state, each rank's RNG) by ``state_io.load_torch`` with ``weights_only=True``; model weights are
safetensors. :func:`verify_checkpoint` reads every file a resume reads, the same way, before any rank loads
anything: a file that is not what the trainer wrote is one :class:`UntrustedCheckpoint` line naming it.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Any, Callable

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, MetadataIndex

from trainer.contract.checkpoint_layout import COMPLETE_MARKER, refused
from trainer.contract.overrides import ConfigError, load_yaml_file

# What DCP's metadata is made of (torch 2.6 to 2.13): the dataclasses of torch.distributed.checkpoint.metadata,
# the per-entry storage record of the file system writer, torch.Size, a tensor layout (rebuilt by name), the
# path the checkpoint was saved to, and the torch dtypes (checked apart: any attribute of torch that is one).
METADATA_TYPES: frozenset[tuple[str, str]] = frozenset({
    ("torch.distributed.checkpoint.metadata", "Metadata"),
    ("torch.distributed.checkpoint.metadata", "StorageMeta"),
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
    ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "TensorProperties"),
    ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
})
ZIP_MAGIC = b"PK\x03\x04"  # every entry torch.save wrote into a shard starts as a zip archive

class MetadataUnpickler(pickle.Unpickler):
    """An unpickler that builds only :data:`METADATA_TYPES` and torch dtypes: no other global is looked up,
    so no other callable can be reached; persistent ids (which DCP's metadata has none of) are refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in METADATA_TYPES:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which DCP metadata never holds")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent id, which DCP metadata never holds")


def load_metadata(path: Path) -> Metadata:
    """DCP metadata read through :class:`MetadataUnpickler`, its structure checked. Raises UntrustedCheckpoint."""
    try:
        with open(path, "rb") as fh:
            metadata = MetadataUnpickler(fh).load()
    except OSError as exc:
        raise refused(path, f"cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # UnpicklingError, EOFError, ValueError, ... of a damaged or foreign file
        raise refused(path, f"is not DCP metadata ({_first_line(exc)})") from None
    _check_metadata(path, metadata)
    return metadata


def _check_metadata(path: Path, metadata: Any) -> None:
    if not isinstance(metadata, Metadata) or not isinstance(getattr(metadata, "storage_data", None), dict):
        raise refused(path, f"is not DCP metadata (it holds {type(metadata).__name__})")
    for index, info in metadata.storage_data.items():
        name = getattr(info, "relative_path", None)
        if not isinstance(index, MetadataIndex) or not isinstance(name, str) or Path(name).name != name \
                or name in ("", ".", ".."):
            raise refused(path, f"names a storage file {name!r} outside its folder")
        if not all(isinstance(getattr(info, k, None), int) and getattr(info, k) >= 0 for k in ("offset", "length")):
            raise refused(path, f"gives {name} an offset or length that is not a count of bytes")
        if getattr(info, "transform_descriptors", None):  # compression the trainer never asks for
            raise refused(path, f"asks for stream transforms {info.transform_descriptors} the trainer never writes")


class TrustedFileSystemReader(FileSystemReader):
    """DCP's file system reader, its metadata read through :class:`MetadataUnpickler`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = Path(self._get_metadata_path(kwargs.get("rank")))
        metadata = load_metadata(path)
        if getattr(metadata, "storage_meta", None) is None:
            from torch.distributed.checkpoint.metadata import StorageMeta

            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class TrustedLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, its non-tensor entries loaded with ``weights_only=True``."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        from torch.distributed.checkpoint._traverse import set_element

        obj = torch.load(value, map_location="cpu", weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


def load_dcp(state: dict[str, Any], folder: Path) -> None:
    """``dcp.load`` of ``folder`` into ``state`` through the trusted reader and planner: the trainer's only way
    to read a DCP folder (the optimizer's ``optim/``, the sharded model's ``model/sharded/``)."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, storage_reader=TrustedFileSystemReader(str(folder)), planner=TrustedLoadPlanner())


# ----------------------------------------------------------------------------- the check before loading

def verify_checkpoint(ckpt: Path) -> None:
    """Read every file of checkpoint ``ckpt`` that a resume reads, as a resume reads it, loading nothing into
    the run: JSON and YAML parsed, ``.pt`` files with ``weights_only=True``, DCP metadata restricted, each
    shard's byte entries with ``weights_only=True`` and its tensor entries in bounds, safetensors headers
    parsed. Raises UntrustedCheckpoint naming the first file that fails."""
    ckpt = Path(ckpt)
    _check_recorded_sizes(ckpt)
    for path in sorted(p for p in ckpt.rglob("*") if p.is_file() or p.is_symlink()):
        if path.is_symlink():
            raise refused(path, "is a symbolic link; a checkpoint holds files only")
        check = _CHECKS.get(path.suffix) or (_check_json if path.name == ".complete" else None)
        if path.name.endswith(".metadata"):
            _check_dcp_folder(path)
        elif check is not None:
            check(path)


def _check_recorded_sizes(ckpt: Path) -> None:
    """The size of each file as ``.complete`` recorded it at publication (checkpoints saved before it did: none)."""
    marker = ckpt / COMPLETE_MARKER
    if not os.path.lexists(marker):  # not a published checkpoint (a bare DCP folder): nothing recorded
        return
    _check_json(marker)
    recorded = json.loads(marker.read_bytes().decode("utf-8"))
    files = recorded.get("files") if isinstance(recorded, dict) else None
    if not isinstance(files, dict):
        return
    for name, size in files.items():
        path = ckpt / str(name)
        if not isinstance(size, int) or Path(str(name)).is_absolute() or ".." in Path(str(name)).parts:
            raise refused(marker, f"records {name!r} ({size!r} bytes), which is no file of a checkpoint")
        if path.is_symlink() or not path.is_file():
            raise refused(path, "is missing; the checkpoint was saved with it")
        if path.stat().st_size != size:
            raise refused(path, f"is {path.stat().st_size} bytes, and was {size} when the checkpoint was saved "
                                "(a truncated or altered copy?)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _check_json(path: Path) -> None:
    try:
        json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise refused(path, f"is not JSON ({_first_line(exc)})") from None


def _check_yaml(path: Path) -> None:
    try:
        data = load_yaml_file(path)
    except (ConfigError, OSError, UnicodeDecodeError) as exc:
        raise refused(path, f"is not a YAML config ({_first_line(exc)})") from None
    if not isinstance(data, dict):
        raise refused(path, "is not a YAML config (no mapping)")


def _check_torch_file(path: Path) -> None:
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for a foreign file
        raise refused(path, f"does not load as weights only ({_first_line(exc)})") from None


def _check_safetensors(path: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception as exc:  # SafetensorError, OSError
        raise refused(path, f"is not a safetensors file ({_first_line(exc)})") from None


def _check_dcp_folder(metadata_path: Path) -> None:
    """The metadata, then each storage entry it lists, one shard file open at a time: byte entries loaded as
    weights only, tensor entries in bounds and starting as torch.save writes them."""
    metadata = load_metadata(metadata_path)
    folder = metadata_path.parent
    per_file: dict[str, list[tuple[Any, Any]]] = {}
    for index, info in metadata.storage_data.items():
        per_file.setdefault(info.relative_path, []).append((index, info))
    for name, entries in sorted(per_file.items()):
        shard = folder / name
        if shard.is_symlink() or not shard.is_file():
            raise refused(metadata_path, f"lists {name}, which is not a file of {folder}")
        size = shard.stat().st_size
        with open(shard, "rb") as fh:
            for index, info in sorted(entries, key=lambda entry: entry[1].offset):
                _check_entry(fh, shard, size, index.fqn, info,
                             isinstance(metadata.state_dict_metadata.get(index.fqn), BytesStorageMetadata))


def _check_entry(fh: Any, shard: Path, size: int, fqn: str, info: Any, is_bytes: bool) -> None:
    if info.offset + info.length > size:
        raise refused(shard, f"ends at byte {size}, before the entry {fqn} its metadata places at "
                             f"{info.offset}..{info.offset + info.length} (a truncated copy?)")
    fh.seek(info.offset)
    data = fh.read(info.length if is_bytes else len(ZIP_MAGIC))
    if not data.startswith(ZIP_MAGIC):
        raise refused(shard, f"entry {fqn} is not what torch.save writes")
    if is_bytes:
        try:
            torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise refused(shard, f"entry {fqn} does not load as weights only ({_first_line(exc)})") from None


_CHECKS: dict[str, Callable[[Path], None]] = {
    ".json": _check_json, ".yaml": _check_yaml, ".pt": _check_torch_file, ".safetensors": _check_safetensors,
}


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer.components.checkpoint_trust CHECKPOINT``: the launcher's check before it starts any
    process (the CLI imports no torch itself). Exit 0 when every file is data, else 2 and one line naming it."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trainer.components.checkpoint_trust CHECKPOINT_FOLDER", file=sys.stderr)
        return 2
    try:
        verify_checkpoint(Path(args[0]))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
