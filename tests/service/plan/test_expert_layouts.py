"""The planner against the expert-tuned layouts of Megatron Bridge's benchmark recipes: a floor under
the figures of benchmarks/README.md ("Planner vs expert-tuned layouts"), so a model change that makes
the ranking worse fails here rather than in the next benchmark run."""

import json

import pytest

from tests.benchmarks.scripts import load_script


def _benchmark():
    return load_script("expert_layouts")


@pytest.fixture(scope="module")
def results():
    bench = _benchmark()
    records = json.loads((bench.shared_dir() / "reference" / "mbridge_recipes.json").read_text())
    evaluated = bench.evaluate([r for r in records if r["kind"] == "perf_benchmark"], sources=True)
    return bench.summary(evaluated), evaluated


# Index-wide (slow): hundreds of plans each. The two tests of the reference set share one evaluation (one xdist
# group, so one worker builds it).
@pytest.mark.slow
@pytest.mark.xdist_group("expert_layouts_reference")
def test_top1_and_top5_agreement_stay_above_the_floor(results):
    summary, _ = results
    assert summary["planned"] >= 250  # the benchmark still covers the index's models
    # 61.1 % and 83.2 % in benchmarks/README.md; targets 60 % (met: the floor is the target) and
    # 90 % (not met: benchmarks/README.md says what is missing). Slack: 2 recipes at top-1, none at top-5; a change
    # that needs more is judged on both sets in benchmarks/README.md first, never by lowering the floor.
    assert summary["top1_pct"] >= 60.0, summary
    assert summary["top5_pct"] >= 83.0, summary


@pytest.mark.slow
def test_held_out_expert_layouts_stay_above_the_floor():
    """Layouts of other public sources (NVIDIA dgxc-benchmarking, the Bridge/NeMo performance summaries:
    H100 and B200 among them, which the reference lacks) that no constant was tuned on: a change that
    helps the reference set by fitting it shows up here."""
    bench = _benchmark()
    summary = bench.summary(bench.evaluate(bench.scored_records(bench.HELDOUT)))
    assert summary["planned"] >= 380 and summary["not_ranked"] == 0, summary
    assert summary["top1_pct"] >= 47.0, summary  # 48.6 % in benchmarks/README.md
    assert summary["top5_pct"] >= 75.0, summary  # 75.7 %


@pytest.mark.slow
@pytest.mark.xdist_group("expert_layouts_reference")
def test_the_rows_plan_shows_hold_the_expert_layout_more_often_than_the_estimate_alone(results):
    """Leave-one-recipe-out (a recipe never transfers to itself): the rows `plan` shows (distinct shapes, the candidate
    sources' choice first, then the nearest transferred layouts) against the estimate's ranking. Floors under the
    figures of benchmarks/README.md ("Candidate sources"): dense top-5 90 of 94, MoE top-5 145 of 168, top-1 167 of
    262; the estimate's own rows hold 79, 106 and 160."""
    _, evaluated = results
    planned = [r for r in evaluated if r["status"] == "planned"]

    def hits(rows, kind, k):
        return sum(r["sources"][kind] is not None and r["sources"][kind] <= k for r in rows)

    dense, moe = [r for r in planned if not r["moe"]], [r for r in planned if r["moe"]]
    assert hits(dense, "shown", 5) >= 89 and hits(moe, "shown", 5) >= 143 and hits(planned, "shown", 1) >= 165
    for rows in (dense, moe):
        assert hits(rows, "shown", 5) > hits(rows, "rows", 5)


@pytest.mark.slow
@pytest.mark.xdist_group("expert_layouts_reference")
def test_every_planned_expert_layout_is_ranked(results):
    _, evaluated = results
    planned = [r for r in evaluated if r["status"] == "planned"]
    assert all(r["rank"] is not None for r in planned), [r["name"] for r in planned if r["rank"] is None]


def test_carried_layouts_names_misses_whose_tuple_ranks_top5_on_a_sibling():
    bench = _benchmark()

    def row(name, hardware, gpus, rank, expert=(1, 1, 1, 8), model="m", mode="pretrain"):
        return {"name": name, "status": "planned", "model": model, "mode": mode, "hardware": hardware,
                "gpus": gpus, "rank": rank, "expert": expert}

    results = [row("miss", "b300", 64, 40), row("sibling", "gb300", 64, 2),
               row("other-tuple", "gb200", 64, 1, expert=(1, 2, 1, 8)), row("other-goal", "gb200", 8, 1, mode="sft"),
               row("lone-miss", "b300", 8, 9, expert=(2, 1, 1, 1)), row("same-machine", "b300", 64, 1)]
    carried = bench.carried_layouts(results)
    assert [(r["name"], [s["name"] for s in sib]) for r, sib in carried] == [("miss", ["sibling"])]
    assert "1 of 2 misses" in bench.carried_markdown(results)
