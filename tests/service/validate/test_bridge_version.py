"""Defaults that moved between Megatron Bridge releases: an unset etp_size means TP before v0.6.0 (commit
6f2f546e, 2026-07-01) and 1 after; findings say which reading they assume, and an unknown version warns."""

from __future__ import annotations

import pytest

from service.validate.document import validate_text
from trainer.contract.bridge_version import ETP_DEFAULT, parse_bridge_version

# TP 4 x EP 8 on 16 GPUs: with ETP 1 the expert mesh is 8 (fits), with ETP = TP = 4 it is 32 (does not)
CONFIG = """{metadata}model:
  pretrained_model_name_or_path: qwen3-30b-a3b
distributed:
  strategy: megatron
  tp_size: 4
  ep_size: 8
  sequence_parallel: true
{etp}hardware:
  gpu_type: h100
  gpus_per_node: 8
  num_nodes: 2
dataset:
  seq_length: 4096
step_scheduler:
  global_batch_size: 64
"""


def mesh_findings(metadata="", etp="", **flags):
    text = CONFIG.format(metadata=metadata, etp=etp)
    return text, [f for f in validate_text(text, "c.yaml", **flags).findings if f.code == "RA-L007"]


@pytest.mark.parametrize("written, after", [("0.5.1", False), ("v0.6.0", True), ("0.6.0rc1", True),
                                            ("2026-06-30", False), ("2026-07-01", True), ("main", True)])
def test_the_version_says_which_reading_holds(written, after):
    assert ETP_DEFAULT.applies_after(parse_bridge_version(written)) is after


def test_an_unknown_version_warns_on_etp_size_when_only_the_old_reading_breaks_the_mesh():
    text, (warning,) = mesh_findings()
    assert warning.severity == "warning" and warning.key == "distributed.etp_size"
    assert "before Megatron Bridge v0.6.0 (commit 6f2f546e, 2026-07-01)" in warning.message
    assert "metadata.bridge_version" in warning.fix and "--bridge-version" in warning.fix


def test_an_old_release_makes_it_an_error_on_etp_size_saying_its_reading():
    _, (error,) = mesh_findings(metadata="metadata:\n  bridge_version: 0.5.1\n")
    assert error.severity == "error" and error.key == "distributed.etp_size"
    assert "reads the unset etp_size as TP = 4" in error.message and "bridge_version 0.5.1" in error.message
    assert "set distributed.etp_size to a divisor of 2" in error.fix


def test_the_flag_wins_over_the_file_and_a_new_release_passes():
    assert mesh_findings(metadata="metadata:\n  bridge_version: 0.5.1\n", bridge_version="0.6.0")[1] == []
    assert mesh_findings(metadata="metadata:\n  bridge_version: '2026-08-01'\n")[1] == []


def test_a_written_etp_size_needs_no_version():
    assert mesh_findings(etp="  etp_size: 1\n")[1] == []
    _, (error,) = mesh_findings(etp="  etp_size: 4\n")
    assert error.severity == "error" and error.key == "distributed.etp_size"


def test_a_version_that_is_none_is_a_schema_error_naming_the_forms():
    text = CONFIG.format(metadata="metadata:\n  bridge_version: banana\n", etp="")
    (bad,) = [f for f in validate_text(text, "c.yaml").findings if f.key == "metadata.bridge_version"]
    assert bad.severity == "error" and "2026-07-01" in bad.message


@pytest.mark.parametrize("metadata, flag, severity", [
    ("metadata:\n  bridge_version: '2025-08-20'\n", None, "error"), ("", "0.5.1", "error"),
    ("metadata:\n  bridge_version: 0.6.0\n", None, "warning"), ("", None, "warning"),
    ("metadata:\n  bridge_version: 0.6.0\n", "0.5.1", "error"),  # the flag speaks for the run
])
def test_model_and_dataset_lengths_that_differ_fail_before_the_launcher_synced_them(metadata, flag, severity):
    """Before run_recipe.py (v0.6.0) synced model.seq_length from the dataset, ConfigContainer.validate() asserted
    they match: an error for a config that states such a release, the sync warning otherwise."""
    text = metadata + CONFIG.format(metadata="", etp="").replace("  seq_length: 4096\n", "  seq_length: 8192\n")
    text = text.replace("  pretrained_model_name_or_path: qwen3-30b-a3b\n",
                        "  pretrained_model_name_or_path: qwen3-30b-a3b\n  seq_length: 131072\n")
    (found,) = [f for f in validate_text(text, "c.yaml", bridge_version=flag).findings if f.code == "RA-C004"]
    assert found.severity == severity and found.key == "model.seq_length"
    assert found.fix == "set model.seq_length: 8192 or remove it"
