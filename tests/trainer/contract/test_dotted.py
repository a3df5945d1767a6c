"""Dotted keys into nested configs (trainer/contract/dotted.py), shared by the trainer's and the service's overrides."""

from __future__ import annotations

import pytest

from trainer.contract.dotted import NotASection, get_dotted, set_dotted, with_dotted


def test_get_follows_the_path_and_misses_quietly():
    data = {"optimizer": {"lr": 1e-4, "betas": [0.9, 0.95]}, "precision": "bf16"}
    assert get_dotted(data, "optimizer.lr") == 1e-4
    assert get_dotted(data, "optimizer") == {"lr": 1e-4, "betas": [0.9, 0.95]}
    assert get_dotted(data, "optimizer.eps") is None
    assert get_dotted(data, "precision.x") is None  # through a scalar
    assert get_dotted(data, "optimizer.betas.0") is None  # lists are values, not sections


def test_set_creates_missing_and_null_sections():
    data = {"dataset": None}
    set_dotted(data, "dataset.seq_length", 4096)
    set_dotted(data, "model.config.hidden_size", 64)
    set_dotted(data, "precision", "fp8")
    assert data == {"dataset": {"seq_length": 4096}, "model": {"config": {"hidden_size": 64}}, "precision": "fp8"}


def test_none_is_a_value_unless_it_removes():
    data = {"distributed": {"vp_size": 2, "tp_size": 4}}
    set_dotted(data, "distributed.tp_size", None)
    assert data == {"distributed": {"vp_size": 2, "tp_size": None}}
    set_dotted(data, "distributed.vp_size", None, none_removes=True)
    set_dotted(data, "distributed.cp_size", None, none_removes=True)  # absent: nothing to remove
    assert data == {"distributed": {"tp_size": None}}


@pytest.mark.parametrize("data, key, prefix", [({"precision": "fp32"}, "precision.x", "precision"),
                                                ({"a": {"b": [1]}}, "a.b.c.d", "a.b")])
def test_set_through_a_scalar_names_the_section(data, key, prefix):
    before = repr(data)
    with pytest.raises(NotASection) as info:
        set_dotted(data, key, 1)
    assert (info.value.key, info.value.prefix) == (key, prefix)
    assert f"{prefix} is a " in str(info.value) and "not a section" in str(info.value)
    assert repr(data) == before


def test_with_dotted_sets_in_order_on_a_deep_copy():
    data = {"optimizer": {"lr": 0.1, "betas": [0.9, 0.95]}}
    out = with_dotted(data, [("optimizer.lr", 1e-4), ("new.key", 3), ("new.key", 4)])
    assert out == {"optimizer": {"lr": 1e-4, "betas": [0.9, 0.95]}, "new": {"key": 4}}
    out["optimizer"]["betas"].append(1.0)
    assert data == {"optimizer": {"lr": 0.1, "betas": [0.9, 0.95]}}, "the input must stay untouched"


@pytest.mark.parametrize("value,said", [(4, "is an int,"), (0.5, "is a float,"), ("fp32", "is a str,"),
                                        ([1], "is a list,")])
def test_a_path_through_a_scalar_names_its_type_with_the_right_article(value, said):
    with pytest.raises(NotASection) as info:
        set_dotted({"dataset": {"seq_length": value}}, "dataset.seq_length.x", 1)
    assert f"dataset.seq_length.x: dataset.seq_length {said} not a section" == str(info.value)
