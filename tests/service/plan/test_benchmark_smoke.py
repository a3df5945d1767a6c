"""The planner's benchmark scripts run end to end in their --smoke mode (the figures come from their full runs)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.paths import REPO


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_expert_layouts_smoke_scores_before_and_after(capsys):
    assert _script("expert_layouts").main(["--sources", "--smoke"]) == 0
    out = capsys.readouterr().out
    assert "| MoE |" in out and "first row's source:" in out


@pytest.mark.slow
def test_plan_speed_smoke_times_the_plan_and_the_answer(capsys):
    assert _script("plan_speed").main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "| llama3-70b on 64 x h100 |" in out and "answer CPU" in out
