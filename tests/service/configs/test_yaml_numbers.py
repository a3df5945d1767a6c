"""Integers in YAML beyond 64 bits: a positioned error naming the key, worded for what was written."""

from __future__ import annotations

import pytest

from service.configs.yamlio import YamlError, load_yaml

BIG = "9" * 5000  # over Python's 4,300-digit limit for int(str)


CASES = {  # how YAML 1.1 writes an integer -> digits as written
    "decimal": (BIG, 5000),
    "hex": ("0x" + "f" * 5000, 5000),
    "sexagesimal": ("1" + "0" * 5000 + ":00", 5003),
    "4000 digits": ("9" * 4000, 4000),  # Python reads it; products of such sizes crashed the rules
    "65 bits": (str(1 << 64), 20),
}


@pytest.mark.parametrize("written, digits", CASES.values(), ids=list(CASES))
def test_an_integer_beyond_64_bits_is_a_positioned_error_naming_the_key(written, digits):
    with pytest.raises(YamlError) as caught:
        load_yaml(f"model:\n  name: x\ndistributed:\n  tp_size: {written}\n", "big.yaml")
    err = caught.value
    assert (err.path, err.line, err.column) == ("big.yaml", 4, 12)
    assert f"`distributed.tp_size` is an integer with {digits:,} digits" in err.reason
    assert "small integers" in err.reason and "write the intended number" in err.fix
    assert str(err).startswith("big.yaml:4:12: ")


def test_integers_within_64_bits_load_as_before():
    limit = (1 << 64) - 1  # torch.manual_seed takes a uint64
    doc = load_yaml(f"a: {limit}\nb: -{limit}\nc: 0x1f\nd: 1_000\nf: '{BIG}'\n")
    assert doc.data == {"a": limit, "b": -limit, "c": 31, "d": 1000, "f": BIG}
    # YAML 1.1's base-60 and leading-zero octal readings are refused, not guessed
    with pytest.raises(YamlError, match="base-60"):
        load_yaml("e: 190:20:30\n")


def test_an_integer_key_beyond_64_bits_names_its_mapping():
    with pytest.raises(YamlError, match=r"a key of `distributed` is an integer with 30 digits") as caught:
        load_yaml("distributed:\n  " + "9" * 30 + ": 1\n")
    assert (caught.value.line, caught.value.column) == (2, 3)


def test_odd_integers_are_worded_for_what_they_are():
    # `!!int abc` is no "integer with 3 digits"; a short number padded past what is read
    # is counted in characters.
    with pytest.raises(YamlError, match=r"`a` is tagged as an integer but 'abc' is not one"):
        load_yaml("a: !!int abc\n", "t.yaml")
    with pytest.raises(YamlError, match=r"`a` is an integer with 301 characters"):
        load_yaml("a: " + "0" * 300 + "1\n", "t.yaml")
