"""What a finding says: capped per code, the fix after a full stop, the engine and hardware named, and fixes
offered only where they apply (nesting, expert sizes, precision, interconnect)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipe_index import resolve_model
from service.facts import Finding, with_fix
from service.plan.planner import PlanError, make_request
from service.validate.document import validate_text
from tests.service.validate.test_trainer_refusals import BUNDLED


def test_findings_of_one_code_are_capped_and_the_last_says_how_many_more():
    from service.validate.document import MAX_FINDINGS_PER_CODE

    text = "\n".join(f"z{i}: 1" for i in range(MAX_FINDINGS_PER_CODE + 250))
    unknown = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C001"]
    assert len(unknown) == MAX_FINDINGS_PER_CODE
    assert unknown[-1].message.endswith("(and 250 more RA-C001 error(s) in this file, not listed)")
    assert not any("more RA-C001" in f.message for f in unknown[:-1])
    from service.validate.document import FileReport

    report = FileReport(path="c.yaml", findings=validate_text(text, "c.yaml").findings)
    assert report.errors == MAX_FINDINGS_PER_CODE + 250  # the summary still counts every one


def test_messages_name_the_engine_and_hardware_they_are_about():
    bundled = BUNDLED.replace("tp_size: 1", "tp_size: 2").replace("sequence_parallel: false", "sequence_parallel: true")
    assert not [f for f in validate_text(bundled, "c.yaml").findings if f.code == "RA-L015"]  # CPU ranks: no NVLink
    sp_alone = BUNDLED.replace("sequence_parallel: false", "sequence_parallel: true")
    (l004,) = [f for f in validate_text(sp_alone, "c.yaml").findings if f.code == "RA-L004"]
    assert "the bundled trainer ignores it" in l004.message
    evil = BUNDLED + "loss_fn:\n  _target_: builtins.eval\n"
    (s001,) = [f for f in validate_text(evil, "c.yaml").findings if f.key == "loss_fn._target_"]
    assert s001.code == "RA-S001" and "'builtins.eval' is not a registered loss_fn callable" in s001.message
    assert s001.fix == "name one of the registry's: trainer.loss.causal_lm_loss"


def test_ra_l008_offers_only_expert_sizes_the_world_holds():
    text = ("model:\n  pretrained_model_name_or_path: deepseek-v2-lite\ndistributed:\n  strategy: megatron\n"
            "  ep_size: 3\nhardware:\n  gpu_type: h100\n  gpus_per_node: 6\ndataset:\n  seq_length: 4096\n")
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-L008"]
    assert finding.fix.endswith("fits in the 6 GPUs: [1, 2]")


@pytest.mark.parametrize("gpu, offers_fp8", [("a100-80gb", False), ("h100", True)])
def test_ra_c005_offers_the_names_precision_only_where_the_gpu_runs_it(gpu, offers_fp8):
    text = ("metadata:\n  name: m_pretrain_8gpu_a100_fp8cs\nmodel:\n  pretrained_model_name_or_path: llama3-8b\n"
            f"distributed:\n  strategy: megatron\nhardware:\n  gpu_type: {gpu}\n  gpus_per_node: 8\nprecision: bf16\n"
            "dataset:\n  seq_length: 4096\n")
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C005"]
    assert ("set precision: fp8" in finding.fix) == offers_fp8 and "rename the recipe to say bf16" in finding.fix


def test_an_unknown_precision_recipe_spelling_is_refused_and_upper_case_suffixes_are_walked(tmp_path):
    from service.validate.document import expand_paths

    text = "metadata:\n  name: x\n  precision_recipe: mxfp8\nmodel:\n  pretrained_model_name_or_path: llama3-8b\n"
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C002"]
    assert finding.key == "metadata.precision_recipe" and "'fp8mx'" in finding.fix
    (tmp_path / "A.YAML").write_text("a: 1\n")
    (tmp_path / "b.Yml").write_text("a: 1\n")
    (tmp_path / "c.txt").write_text("a: 1\n")
    assert sorted(Path(p).name for p in expand_paths([str(tmp_path)])[0]) == ["A.YAML", "b.Yml"]


def test_a_dotted_yaml_key_is_named_as_one_key_with_the_nesting_fix():
    findings = [f for f in validate_text("optimizer.lr: 0.1\ndistributed:\n  tp.size: 2\n", "c.yaml").findings
                if f.code == "RA-C001"]
    by_key = {f.key: f for f in findings}
    assert "unknown key `optimizer.lr`: a YAML key is one name" in by_key["optimizer.lr"].message
    assert by_key["optimizer.lr"].fix == "nest it: `optimizer:` on one line and `  lr: ...` under it"
    assert by_key["distributed.tp.size"].fix == "did you mean `tp_size`?"


@pytest.mark.parametrize("text, fix", [('"distributed.": 1\n', "did you mean `distributed`?"),
                                       ('rng:\n  "seed.x": 1\n', "did you mean `seed`?")])
def test_the_nesting_fix_is_offered_only_where_a_section_can_hold_the_rest(text, fix):
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C001"]
    assert finding.fix == fix


def test_a_fix_follows_its_message_after_a_full_stop():
    assert (with_fix("64 > the 8 of one h100 node", "pass gpus <= 8")
            == "64 > the 8 of one h100 node. Fix: pass gpus <= 8")
    assert with_fix("ends a sentence.", "do this") == "ends a sentence. Fix: do this"
    assert with_fix("no fix", None) == "no fix"
    assert Finding("RA-X", "error", "why", fix="how").text == "why. Fix: how"
    with pytest.raises(PlanError, match=r"node\. Fix: "):
        make_request(resolve_model("llama3-8b"), 64, "h100", nodes=1)


def test_tp_over_pcie_inside_an_l40s_node_is_not_called_inter_node():
    from service.validate.document import validate_text

    text = ("model:\n  pretrained_model_name_or_path: llama3-8b\ndistributed:\n  strategy: megatron\n  tp_size: 8\n"
            "hardware:\n  gpu_type: l40s\n  gpus_per_node: 8\n")
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-L015"]
    assert "PCIe inside the node" in finding.message and "inter-node" not in finding.message
