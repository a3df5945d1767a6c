"""The bundled engine plans and recommends context and pipeline parallel where the trainer runs them."""

from __future__ import annotations

from service.plan.planner import make_request, plan
from service.recommend.recommendation import recommend
from service.validate.document import validate_text


def test_plan_lists_context_parallel_layouts_for_a_long_sequence():
    result = plan(make_request("llama32-1b", 2, "cpu", goal="pretrain", engine="bundled", seq_length=16384,
                               precision="fp32"))
    cp_rows = [row for row in result.layouts if row.structure.cp == 2]
    assert cp_rows and all(row.tokens_per_s and row.memory_total_gib > 0 for row in cp_rows)
    # CP 2 splits the activations a rank holds: less memory than the same variant without CP
    def variant(row):
        return row.micro_batch_size, row.recompute, row.sharding

    no_cp = {variant(row): row for row in result.layouts if row.structure.cp == 1 and row.structure.tp == 1}
    pairs = [(row, no_cp[variant(row)]) for row in cp_rows if variant(row) in no_cp]
    assert pairs and all(cp.memory_total_gib < plain.memory_total_gib for cp, plain in pairs)


def test_recommend_picks_context_parallel_when_it_wins_and_says_so():
    rec = recommend("llama32-1b", 2, "cpu", goal="pretrain", engine="bundled", seq_length=16384)
    assert rec.config["distributed"]["cp_size"] == 2
    assert any("chosen: cp_size 2" in note for note in rec.notes)
    assert rec.errors == 0


def test_pipeline_layouts_of_an_untied_model_are_planned_and_tied_ones_refused():
    untied = plan(make_request("llama3-8b", 2, "cpu", goal="pretrain", engine="bundled", seq_length=4096,
                               precision="fp32"))
    assert any(row.structure.pp == 2 for row in untied.layouts)
    tied = plan(make_request("llama32-1b", 2, "cpu", goal="pretrain", engine="bundled", seq_length=4096,
                             precision="fp32"))
    assert not any(row.structure.pp > 1 for row in tied.layouts) and "RA-E008" in tied.rejections


def test_long_context_card_gives_a_context_parallel_config_that_validates():
    rec = recommend("tiny-llama-long", 2, "cpu", goal="pretrain", engine="bundled", seq_length=8192,
                    overrides=["--distributed.cp_size", "2"])
    assert rec.config["distributed"]["cp_size"] == 2 and rec.config["dataset"]["seq_length"] == 8192
    assert rec.errors == 0


def test_validate_refuses_a_context_parallel_split_that_does_not_divide_the_sequence():
    text = ("model: {pretrained_model_name_or_path: tiny-llama-long}\n"
            "distributed: {strategy: fsdp2, cp_size: 2}\n"
            "dataset: {_target_: trainer.data.MockDataset, seq_length: 8190}\n"
            "hardware: {gpu_type: cpu, gpus_per_node: 2}\n")
    report = validate_text(text, "c.yaml")
    assert any("2*cp_size" in f.message or "2 x" in f.message for f in report.findings if f.severity == "error")
