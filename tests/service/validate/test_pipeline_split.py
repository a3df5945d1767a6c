"""Uneven pipeline splits (RA-L011) and layout tables (RA-L019): what Megatron refuses is an error, the pairs
and layouts a fix offers pass, the split offered is the most balanced."""

from __future__ import annotations

import pytest
import yaml

from service.validate.document import validate_text

MEGATRON = """model:
  pretrained_model_name_or_path: {model}
{model_keys}distributed:
  strategy: megatron
  pp_size: {pp}
  vp_size: {vp}
  ep_size: {ep}
hardware:
  gpu_type: h100
  gpus_per_node: 8
  num_nodes: {nodes}
dataset:
  seq_length: 4096
"""


def split_findings(model, pp, vp, ep=1, nodes=8, model_keys=""):
    text = MEGATRON.format(model=model, pp=pp, vp=vp, ep=ep, nodes=nodes, model_keys=model_keys)
    return [f for f in validate_text(text, "c.yaml").findings if f.code in ("RA-L011", "RA-L019")]


def _megatron(model: str, pp: int, vp=None, gpus: int = 512) -> str:
    return yaml.safe_dump({
        "model": {"pretrained_model_name_or_path": model},
        "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": pp, "vp_size": vp, "ep_size": 16,
                        "pipeline_layout": "explicit"},
        "dataset": {"seq_length": 4096},
        "step_scheduler": {"global_batch_size": 4096, "local_batch_size": 1},
        "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": gpus // 8},
    })


@pytest.mark.parametrize("model", ["kimi-k2", "deepseek-v3", "moonlight-16b"])
def test_every_pair_ra_l019_offers_passes_ra_l011(model):
    from service.layouts.bridge_tables import PIPELINE_LAYOUT_TABLES

    for pp, vp in sorted(PIPELINE_LAYOUT_TABLES[model]):
        if pp > 1:
            assert split_findings(model, pp, vp, ep=8, nodes=64) == [], (model, pp, vp)


def test_a_pair_outside_the_table_gets_both_ways_out_in_the_fix():
    (l011,) = [f for f in split_findings("kimi-k2", 4, 3, ep=8, nodes=64) if f.code == "RA-L011"]
    assert l011.severity == "error" and "(4, 2)" in l011.fix and "model.pipeline_model_parallel_layout" in l011.fix


def test_megatrons_split_settings_under_model_clear_the_warning_when_they_add_up():
    (warning,) = split_findings("llama3-8b", 5, 1, nodes=5)
    assert warning.severity == "warning" and "under `model:`" in warning.fix
    right = "  num_layers_in_first_pipeline_stage: 5\n  num_layers_in_last_pipeline_stage: 6\n"
    assert split_findings("llama3-8b", 5, 1, nodes=5, model_keys=right) == []
    wrong = "  num_layers_in_first_pipeline_stage: 4\n  num_layers_in_last_pipeline_stage: 6\n"
    (error,) = split_findings("llama3-8b", 5, 1, nodes=5, model_keys=wrong)
    assert error.severity == "error" and "22 layers left for 3 stage(s)" in error.message
    accounted = "  account_for_embedding_in_pipeline_split: true\n  account_for_loss_in_pipeline_split: true\n"
    assert split_findings("llama3-8b", 2, 1, nodes=2, model_keys=accounted) == []  # 34 over 2


@pytest.mark.parametrize("model, pp, vp, ep, nodes, keys, said", [
    ("llama3-8b", 5, 1, 1, 5, {"num_layers_in_first_pipeline_stage": 4, "num_layers_in_last_pipeline_stage": 5,
                               "account_for_embedding_in_pipeline_split": "true"}, "cannot be set together"),
    ("llama3-8b", 2, 2, 1, 2, {"num_layers_in_first_pipeline_stage": 15, "num_layers_in_last_pipeline_stage": 17},
     "does not divide by VP=2"),
    ("llama3-8b", 4, 1, 1, 4, {"num_layers_in_first_pipeline_stage": 0}, "a whole number above 0"),
    ("llama3-8b", 4, 1, 1, 4, {"account_for_embedding_in_pipeline_split": "true"}, "33 layers left for 4"),
    ("kimi-k2", 4, 2, 8, 64, {"num_layers_in_first_pipeline_stage": 3}, "Megatron refuses"),
])
def test_split_settings_megatron_refuses_are_errors(model, pp, vp, ep, nodes, keys, said):
    """Megatron-Core's TransformerConfig refuses each of these."""
    written = "".join(f"  {k}: {v}\n" for k, v in keys.items())
    (error,) = [f for f in split_findings(model, pp, vp, ep=ep, nodes=nodes, model_keys=written)
                if f.code == "RA-L011"]
    assert error.severity == "error" and said in error.message


def test_a_split_that_only_adds_up_with_the_accounting_passes_and_vp_counts_per_rank():
    both = "  account_for_embedding_in_pipeline_split: true\n  account_for_loss_in_pipeline_split: true\n"
    assert split_findings("gemma2-9b", 4, 1, nodes=4, model_keys=both) == []  # 42 + 2 = 44: 11 a stage
    (error,) = split_findings("gemma2-9b", 4, 1, nodes=4, model_keys=both.splitlines()[0] + "\n")
    assert "43 layers left for 4 stage(s)" in error.message  # one flag is not enough
    edges = "  num_layers_in_first_pipeline_stage: 6\n  num_layers_in_last_pipeline_stage: 6\n"
    assert split_findings("llama3-8b", 4, 2, nodes=4, model_keys=edges) == []  # 6 / 10 x 2 / 6, each by VP 2


def test_the_layout_string_ra_l019_names_clears_ra_l011_and_the_pairs_fit_the_world():
    layout = '  pipeline_model_parallel_layout: "Et*15|t*15|t*15|t*16L"\n'
    assert [f.code for f in split_findings("kimi-k2", 4, 3, ep=8, nodes=8, model_keys=layout)] == ["RA-L019"]
    (l011,) = [f for f in split_findings("kimi-k2", 4, 3, ep=8, nodes=8) if f.code == "RA-L011"]
    assert "(8, 2)" in l011.fix and "(16, 1)" not in l011.fix  # PP 16 x EP 8 is more than 64 GPUs


@pytest.mark.parametrize("model, pp, vp, warned", [
    ("kimi-k2", 32, None, True),      # the pair recommend picked: Bridge's builder raises for it
    ("kimi-k2", 16, None, False),     # in the table
    ("kimi-k2", 8, 2, False),
    ("deepseek-v3", 2, None, True),   # its setter leaves the layout unset: 61 layers need one
    ("glm-45v", 2, None, False),      # so does GLM-4.5V's, and 46 layers split evenly over 2
])
def test_a_pipeline_outside_the_library_recipes_table_is_said(model, pp, vp, warned):
    found = [f for f in validate_text(_megatron(model, pp, vp), "c.yaml").findings if f.code == "RA-L019"]
    assert bool(found) is warned
    if warned:
        assert found[0].severity == "warning" and "(16, 1)" in found[0].fix
        assert "pipeline_model_parallel_layout" in found[0].fix
        assert ("raises ValueError" in found[0].message) is (model == "kimi-k2")


def test_an_uneven_pipeline_outside_a_falling_back_table_is_said():
    """GLM-4.5V's builder leaves the layout unset outside its table; 46 layers over 4 x 12."""
    [finding] = [f for f in validate_text(_megatron("glm-45v", 4, 12, gpus=128), "c.yaml").findings
                 if f.code == "RA-L019"]
    assert "leaves the layout unset" in finding.message and "46 decoder layers" in finding.message


@pytest.mark.parametrize("layers, pp, vp, first, last", [(92, 8, 1, 10, 10), (61, 16, 1, 2, 3), (100, 6, 2, 14, 14)])
def test_the_uneven_split_offered_is_the_most_balanced(layers, pp, vp, first, last):
    # The first split found put 15 layers on each middle stage of 92 over PP 8.
    from service.layouts.arithmetic import megatron_split

    split = megatron_split(layers, pp, vp)
    assert split == f"num_layers_in_first_pipeline_stage={first} and num_layers_in_last_pipeline_stage={last}"
    middle = (layers - first - last) // (pp - 2)
    assert middle * (pp - 2) + first + last == layers and middle % vp == 0 and first % vp == 0
