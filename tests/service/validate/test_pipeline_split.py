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


def test_layers_that_do_not_divide_are_an_error_fixed_by_the_split_megatron_takes():
    """transformer_block.get_num_layers_to_build asserts layers % PP == 0 without a split: the run fails."""
    (error,) = split_findings("llama3-8b", 5, 1, nodes=5)
    assert error.severity == "error" and "under `model:`" in error.fix
    assert error.key == "model.num_layers_in_first_pipeline_stage"  # the key its fix sets, not yet in the file
    assert error.line == 5  # at pp_size, the value that broke the split (an inline ignore there accepts it)
    assert "num_layers_in_first_pipeline_stage=5 and num_layers_in_last_pipeline_stage=6" in error.fix
    right = "  num_layers_in_first_pipeline_stage: 5\n  num_layers_in_last_pipeline_stage: 6\n"
    assert split_findings("llama3-8b", 5, 1, nodes=5, model_keys=right) == []
    wrong = "  num_layers_in_first_pipeline_stage: 4\n  num_layers_in_last_pipeline_stage: 6\n"
    (error,) = split_findings("llama3-8b", 5, 1, nodes=5, model_keys=wrong)
    assert error.severity == "error" and "22 layers left for 3 stage(s)" in error.message
    accounted = "  account_for_embedding_in_pipeline_split: true\n  account_for_loss_in_pipeline_split: true\n"
    assert split_findings("llama3-8b", 2, 1, nodes=2, model_keys=accounted) == []  # 34 over 2


def test_layers_that_divide_over_pp_but_not_into_vp_chunks_name_vp_size():
    """32 layers over PP 4 are 8 per rank; VP 3 does not divide them (get_num_layers_to_build asserts)."""
    (error,) = split_findings("llama3-8b", 4, 3, nodes=4)
    assert error.severity == "error" and error.key == "distributed.vp_size"
    assert error.fix.startswith("set distributed.vp_size to 2 or 4 or 8 (divisors of 8), or leave it out")
    assert split_findings("llama3-8b", 4, 2, nodes=4) == []


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
    from service.layouts.pipeline_layout import even_layout

    layout = f'  pipeline_model_parallel_layout: "{even_layout(61, 4, 3)}"\n'
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


def _layout_findings(layout_line: str, pp=4, vp=None, extra=""):
    text = MEGATRON.format(model="kimi-k2", pp=pp, vp=vp, ep=8, nodes=64,
                           model_keys=f"  pipeline_model_parallel_layout: {layout_line}\n{extra}")
    return text, [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-L011"]


def test_a_layout_that_misplaces_the_layers_is_an_error_at_its_line_and_the_fix_clears_it():
    text, (error,) = _layout_findings('"Et*15|t*15|t*15|t*15L"')
    assert error.severity == "error" and error.key == "model.pipeline_model_parallel_layout"
    assert "places 60 decoder layers (t), the model has 61" in error.message
    assert error.line == text.splitlines().index('  pipeline_model_parallel_layout: "Et*15|t*15|t*15|t*15L"') + 1
    fixed = error.fix.split('"')[1]
    assert _layout_findings(f'"{fixed}"')[1] == []


def test_the_list_form_is_read_too():
    stages = [["embedding"] + ["decoder"] * 15, ["decoder"] * 16, ["decoder"] * 15, ["decoder"] * 14 + ["loss"]]
    (error,) = _layout_findings(str(stages))[1]
    assert "places 60 decoder layers" in error.message
    stages[-1].insert(0, "decoder")
    assert _layout_findings(str(stages))[1] == []


def test_a_vp_that_disagrees_with_the_layout_names_vp_size():
    (error,) = _layout_findings('"Et*15|t*16|t*15|t*15L"', vp=2)[1]
    assert error.key == "distributed.vp_size" and "distributed.vp_size: 1" in error.fix


def test_mtp_layers_must_match_the_model_configs_mtp_num_layers():
    (error,) = _layout_findings('"Et*15|t*16|t*15|t*15L"', extra="  mtp_num_layers: 1\n")[1]
    assert "mtp_num_layers 1" in error.message and "mL" in error.fix
    assert _layout_findings('"Et*15|t*16|t*15|t*15mL"', extra="  mtp_num_layers: 1\n")[1] == []


def test_an_empty_stage_is_a_warning_and_a_bad_character_an_error():
    (warning,) = _layout_findings('"Et*31||t*30|L"')[1]
    assert warning.severity == "warning" and "stage(s) 1" in warning.message
    (error,) = _layout_findings('"Et*15|t*16|x*15|t*15L"')[1]
    assert error.severity == "error" and "'x'" in error.message


def test_a_shipped_recipe_at_its_own_pipeline_is_placed_by_its_function():
    """Llama 3.1 405B's library recipe counts the embedding and loss (126 + 2 over PP 8 x VP 2): the index does
    not record those keys, the recipe's function sets them."""
    from recipe_index import load_recipe_text

    text = load_recipe_text("llama31_405b_pretrain_256gpu_h100_bf16")
    assert "pp_size: 8\n  vp_size: 2" in text
    assert [f for f in validate_text(text, "r.yaml").findings if f.code == "RA-L011"] == []
    moved = text.replace("pp_size: 8", "pp_size: 4")  # 126 over 4 x 2: the recipe's split is for its own PP
    (error,) = [f for f in validate_text(moved, "r.yaml").findings if f.code == "RA-L011"]
    assert error.severity == "error"
