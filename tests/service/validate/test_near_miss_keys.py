"""A free-form dataset key that names a known one (abbreviations expanded, or within two edits) is an error whose
fix is the known key; other unknown keys stay allowed."""

from __future__ import annotations

import pytest

from service.configs.near_miss import edits, near_miss, words
from service.validate.document import validate_text

CONFIG = """model:
  pretrained_model_name_or_path: llama3-8b
distributed:
  strategy: megatron
  tp_size: 2
  sequence_parallel: true
dataset:
  preset: squad
  {key}: 4096
hardware:
  gpu_type: h100
  gpus_per_node: 8
"""


@pytest.mark.parametrize("written, known", [
    ("sequence_length", "seq_length"), ("seq_len", "seq_length"), ("seq_lenght", "seq_length"),
    ("number_workers", "num_workers"), ("packed_sequense", "packed_sequence"), ("pin_mem", None),
    ("my_own_option", None), ("seq_length", None), ("_target_", None), ("splt", "split"),
])
def test_a_near_miss_names_the_known_key(written, known):
    from service.configs.dataset_keys import PRESET_KEYS

    assert near_miss(written, PRESET_KEYS) == known


def test_abbreviations_expand_and_swaps_count_one_edit():
    assert words("mbs") == ("micro", "batch", "size") and words("lr") == ("learning", "rate")
    assert near_miss("lr", ["learning_rate"]) == "learning_rate" and near_miss("mbs", ["micro_batch_size"])
    assert edits("seq_lenght", "seq_length") == 1 and edits("abcdef", "uvwxyz") == 3


def test_a_misspelt_dataset_key_is_an_error_at_its_line_with_the_known_key_as_fix():
    text = CONFIG.format(key="sequence_length")
    (error,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-D005"]
    assert error.severity == "error" and error.key == "dataset.sequence_length"
    assert error.line == 9 and error.fix == "rename dataset.sequence_length to dataset.seq_length"


def test_other_unknown_keys_and_target_datasets_are_left_alone():
    assert not [f for f in validate_text(CONFIG.format(key="my_own_option"), "c.yaml").findings
                if f.code == "RA-D005"]
    target = CONFIG.replace("preset: squad", "_target_: trainer.data.MockDataset").format(key="sequence_length")
    assert not [f for f in validate_text(target, "c.yaml").findings if f.code == "RA-D005"]
