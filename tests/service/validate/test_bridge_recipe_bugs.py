"""Recipe bugs that shipped in Megatron Bridge and were fixed later (tests/service/validate/bridge_recipe_bugs/: the
recipe before and after the upstream fix, in this product's format): each buggy one is an error on the key the fix
changed where validate can know it, and no fixed one has an error the buggy one lacks; in this product's format and
written as a Bridge ConfigContainer YAML. The figures are in benchmarks/README.md (benchmarks/bridge_recipe_bugs.py).
"""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import load_script

BUGS = load_script("bridge_recipe_bugs")
CASES = BUGS.load_pairs()


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("dialect", ["ours", "bridge"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_bug_is_found_as_recorded_and_its_fix_adds_no_error(case, dialect):
    judged = BUGS.judge(case, dialect)
    assert judged["new_on_fixed"] == []
    assert judged["outcome"] == case["expect"][dialect], judged["errors"]


def test_most_bugs_are_errors_on_the_key_their_fix_changed():
    caught = [c for c in CASES if c["expect"]["ours"] == "error on fixed key"]
    assert len(CASES) >= 13 and len(caught) >= 11


def test_the_bridge_dialect_spells_a_finding_on_an_unwritten_key_its_own_way():
    """An unset ETP read as TP breaks the expert mesh: the finding names Bridge's key, though the YAML lacks it."""
    (case,) = [c for c in CASES if c["name"] == "qwen3_30b_a3b_etp"]
    assert BUGS.judge(case, "bridge")["errors"] == ["RA-L007 model.expert_tensor_parallel_size"]
