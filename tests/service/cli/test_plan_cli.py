"""`recipe-advisor plan` and POST /v1/plan: `--top`, the footer, and figures that agree with what they are
judged against."""

from __future__ import annotations

import json

import pytest

from service.cli.app import main


@pytest.mark.parametrize("top", ["-1", "-5", "x"])
def test_plan_refuses_a_negative_or_non_numeric_top(top, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--top", top])
    assert exit_.value.code == 2 and "--top" in capsys.readouterr().err


def test_plan_footer_speaks_of_the_rows_marked_not_fitting(capsys):
    # Rows are shapes, each its best variant: on 8 x a100 some shapes have no variant that fits, others do.
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "a100", "--top", "0"]) == 0
    out = capsys.readouterr().out
    shapes = int(out.splitlines()[1].split(" distinct shapes")[0].rsplit(" ", 1)[1])
    marked = sum("  does not fit" in line for line in out.splitlines())
    footer = next(line for line in out.splitlines() if "marked" in line)
    assert 0 < marked < shapes  # some rows fit, so the footer cannot be about the request
    assert footer.startswith(f"{marked} of the {shapes} rows shown are marked \"does not fit\"; row ")
    assert "needs" in footer
    assert not any(line.startswith("does not fit:") for line in out.splitlines())


@pytest.mark.parametrize("top", [0, -1])
def test_the_api_top_has_no_all_and_refuses_zero_as_the_docs_say(client, top):
    # The CLI reads --top 0 as "all" (test_plan_footer_... above); a bounded API response has no "all".
    body = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "top": top}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "top"]


def test_published_fits_agrees_with_the_published_total_and_mfu_is_never_zero(capsys):
    """A total a hair above the limit rounded onto it; MFU rounded to 0.0."""
    assert main(["plan", "--model", "deepseek-v3", "--gpus", "1024", "--gpu-type", "l40s", "--goal", "sft",
                 "--precision", "fp8", "--format", "json", "--top", "0"]) == 0
    plan = json.loads(capsys.readouterr().out)
    usable = plan["hardware"]["usable_gib"]
    assert all(row["fits"] == (row["memory_gib"]["total"] <= usable) for row in plan["layouts"])
    assert main(["plan", "--model", "tiny-llama", "--gpus", "64", "--gpu-type", "r100", "--goal", "peft",
                 "--precision", "fp8mx", "--format", "json", "--top", "0"]) == 0
    assert all(row["mfu"] > 0 for row in json.loads(capsys.readouterr().out)["layouts"])
