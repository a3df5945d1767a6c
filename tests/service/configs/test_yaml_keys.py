"""Keys in YAML: merge keys yield to the keys written beside them, a key written twice is still one,
keys that share a name keep their own types and positions."""

from __future__ import annotations

import json

from service.cli.app import main
from service.configs.yamlio import load_yaml

MERGED = """\
dataset: &ds {_target_: trainer.data.MockDataset, num_samples: 4096, seed: 1234, seq_length: 64}
validation_dataset:
  <<: *ds
  num_samples: 64
  seed: 4321
"""


def test_keys_that_override_a_merge_are_no_duplicates_wherever_the_merge_stands():
    doc = load_yaml(MERGED + "other:\n  seed: 1\n  <<: *ds\n")
    assert doc.duplicates == []
    assert doc.data["validation_dataset"] == {"_target_": "trainer.data.MockDataset", "num_samples": 64,
                                              "seed": 4321, "seq_length": 64}
    assert doc.data["other"]["seed"] == 1 and doc.data["other"]["num_samples"] == 4096


def test_a_key_written_twice_beside_a_merge_is_still_a_duplicate():
    doc = load_yaml("a: &a {p: 1}\nb: &b {p: 2, q: 3}\nc:\n  <<: [*a, *b]\n  q: 4\n  q: 5\n")
    assert doc.data["c"] == {"p": 1, "q": 5}  # of several merged mappings the first wins
    assert doc.duplicates == [("c.q", 6, 3)]


def test_a_number_key_and_a_text_key_are_two_keys():
    doc = load_yaml('m:\n  1: a\n  "1": b\n')
    assert doc.duplicates == [] and sorted(doc.data["m"].values()) == ["a", "b"]
    doc = load_yaml('m:\n  "1": a\n  1: b\n  1: c\n')
    assert doc.duplicates == [("m.1", 4, 3)] and sorted(doc.data["m"].values()) == ["a", "c"]


def test_diff_and_validate_take_merge_overrides(tmp_path, capsys):
    merged, base = tmp_path / "merge.yaml", tmp_path / "base.yaml"
    merged.write_text(MERGED)
    base.write_text(MERGED.replace("seed: 4321", "seed: 1"))
    assert main(["diff", str(base), str(merged)]) == 0
    out = capsys.readouterr().out
    assert "validation_dataset.seed" in out and "set twice" not in out
    main(["validate", str(merged), "--format", "json"])
    codes = [f["code"] for f in json.loads(capsys.readouterr().out)["files"][0]["findings"]]
    assert "RA-C003" not in codes


def test_diff_still_refuses_a_key_written_twice(tmp_path, capsys):
    dup = tmp_path / "dup.yaml"
    dup.write_text(MERGED + "  seed: 5\n")
    assert main(["diff", str(dup), str(dup)]) == 2
    assert f"{dup}:6:3" in capsys.readouterr().err


def test_keys_that_share_a_name_keep_their_types_positions_and_duplicates():
    text = ("m:\n"
            "  1: int\n"
            "  '1': str\n"        # the number gives the name up and keeps its type
            "  2024-01-01: date\n"
            "  '2024-01-01': text\n"
            "  x: first\n"
            "  x: second\n"       # written twice: a duplicate at its own line
            "  0.5: float\n"
            "  !!str 0.5: str\n")
    doc = load_yaml(text, "k.yaml")
    assert list(doc.data["m"].items()) == [(1, "int"), ("1", "str"), ("2024-01-01", "text"), ("x", "second"),
                                           (0.5, "float"), ("0.5", "str")]
    assert doc.duplicates == [("m.x", 7, 3)]
    assert doc.positions["m.1"] == (3, 3) and doc.positions["m.x"] == (7, 3) and doc.positions["m.0.5"] == (9, 3)


def test_merged_keys_yield_to_explicit_ones_wherever_the_merge_stands():
    text = ("base: &b {a: 1, b: 2, c: 3}\n"
            "m:\n"
            "  a: own\n"
            "  <<: [*b, {d: 4, a: 9}]\n"
            "  <<: {e: 5}\n"
            "  b: own\n")
    doc = load_yaml(text)
    assert doc.data["m"] == {"a": "own", "c": 3, "d": 4, "e": 5, "b": "own"}
    assert doc.duplicates == []
