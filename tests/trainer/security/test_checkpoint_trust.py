"""A checkpoint is data: for every layout the trainer writes, a planted pickle in any file (or in any byte entry
of a DCP shard) is refused before anything loads and runs nothing; random bytes or a truncated copy of any file
are one error line naming the file; the real checkpoint passes and loads exactly as DCP's own loader loads it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from tests.trainer.security.layouts import LAYOUTS
from tests.trainer.security.tampering import (
    Place,
    byte_entries,
    damaged,
    every_file,
    plant,
    randomise,
    truncate,
)
from trainer.components.checkpoint_trust import (
    METADATA_TYPES,
    TrustedFileSystemReader,
    TrustedLoadPlanner,
    verify_checkpoint,
)
from trainer.contract.checkpoint_layout import UntrustedCheckpoint

# Each layout's checkpoint is a 2-process run, built once per session: on one xdist worker, so it is built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("checkpoint_of")]


class _TrustedEmptyPlanner(TrustedLoadPlanner, _EmptyStateDictLoadPlanner):
    """Loads every entry of a checkpoint into an empty state dict, byte entries as weights only."""


def _load_all(folder: Path, reader, planner) -> dict:
    state: dict = {}
    _load_state_dict(state, storage_reader=reader, planner=planner, no_dist=True)
    return state


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _working_copy(ckpt: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(ckpt, tmp_path / ckpt.name))


def _refusal(ckpt: Path) -> str:
    with pytest.raises(UntrustedCheckpoint) as caught:
        verify_checkpoint(ckpt)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_real_checkpoint_passes_and_loads_as_dcp_loads_it(layout, checkpoint_of):
    ckpt = checkpoint_of(layout)
    verify_checkpoint(ckpt)
    optim = ckpt / "optim"
    ours, theirs = TrustedFileSystemReader(str(optim)), FileSystemReader(str(optim))
    ours.load_id = theirs.load_id
    assert ours.read_metadata() == theirs.read_metadata()
    ours = _load_all(optim, TrustedFileSystemReader(str(optim)), _TrustedEmptyPlanner())
    theirs = _load_all(optim, FileSystemReader(str(optim)), _EmptyStateDictLoadPlanner())
    assert ours and _same(ours, theirs)
    assert list(byte_entries(ckpt)), "the optimizer's param_groups are byte entries"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_planted_pickle_in_any_file_or_byte_entry_is_refused_and_runs_nothing(layout, checkpoint_of, tmp_path):
    ckpt = _working_copy(checkpoint_of(layout), tmp_path)
    marker = tmp_path / "ran"
    places = every_file(ckpt) + list(byte_entries(ckpt))
    assert {str(p.file) for p in places} >= {"optim/.metadata", "trainer_state.pt", "rng/rank_0.pt",
                                              "rng/rank_1.pt", "schedule.json", "config.yaml"}
    for place in places:
        with damaged(ckpt, place, lambda path, place=place: plant(ckpt, place, marker)):
            message = _refusal(ckpt)
        assert str(ckpt / place.file) in message, (place, message)
        if place.fqn:
            assert place.fqn in message
        assert not marker.exists(), f"the pickle planted in {place} ran"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_random_or_truncated_file_is_one_line_naming_it(layout, checkpoint_of, tmp_path):
    ckpt = _working_copy(checkpoint_of(layout), tmp_path)
    for place in every_file(ckpt):
        for damage in (randomise, truncate):
            with damaged(ckpt, place, damage) as path:
                message = _refusal(ckpt)
            assert str(path) in message, (place, damage.__name__, message)


def test_dcp_own_loader_would_run_the_planted_pickles(checkpoint_of, tmp_path):
    """The plants are live: DCP's stock reader and planner run them; the trusted ones refuse them."""
    ckpt = _working_copy(checkpoint_of("fsdp2"), tmp_path)
    optim, marker = ckpt / "optim", tmp_path / "ran"
    entry = next(byte_entries(ckpt))
    with damaged(ckpt, entry, lambda path: plant(ckpt, entry, marker)):
        with pytest.raises(CheckpointException, match=r"GLOBAL (posix|nt)\.system"):
            _load_all(optim, TrustedFileSystemReader(str(optim)), _TrustedEmptyPlanner())
        assert not marker.exists()
        with pytest.raises(CheckpointException):  # after the pickle ran: it is no torch.save file
            _load_all(optim, FileSystemReader(str(optim)), _EmptyStateDictLoadPlanner())
        assert marker.exists(), "DCP's load_bytes unpickles byte entries freely"
    marker.unlink()
    metadata = Place(Path("optim/.metadata"))
    with damaged(ckpt, metadata, lambda path: plant(ckpt, metadata, marker)):
        with pytest.raises(UntrustedCheckpoint, match=r"names posix\.system|names nt\.system"):
            TrustedFileSystemReader(str(optim)).read_metadata()
        assert not marker.exists()
        with pytest.raises(AttributeError):  # after the pickle ran: os.system's exit status is no Metadata
            FileSystemReader(str(optim)).read_metadata()
        assert marker.exists(), "DCP's read_metadata unpickles freely"


def test_metadata_unpickler_admits_only_dcp_types():
    modules = {module for module, _ in METADATA_TYPES}
    assert modules <= {"torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem", "torch",
                       "torch.serialization", "pathlib", "collections"}
    assert DefaultLoadPlanner.load_bytes is not TrustedLoadPlanner.load_bytes
