"""The uneven pipeline split a recommended config carries: placed for the layout the overrides end with,
dropped for a layout string or a split that no longer places the pipeline."""

from __future__ import annotations

import pytest
import yaml

from recipe_index import find_bundled_model
from service.cli.app import main


@pytest.mark.parametrize("model, gpus, split", [
    ("llama3-8b", 3, {"account_for_embedding_in_pipeline_split": True}),
    ("olmoe-7b", 6, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True})])
def test_a_recommended_uneven_pipeline_carries_its_split(client, model, gpus, split):
    answer = client.post("/v1/recommend", json={"model": model, "gpus": gpus, "gpu_type": "h100",
                                                "goal": "pretrain"}).json()
    config = yaml.safe_load(answer["config_yaml"])
    layers = find_bundled_model(model).num_hidden_layers
    dist = config["distributed"]
    assert layers % (dist["pp_size"] * (dist.get("vp_size") or 1)), "the case needs an uneven split"
    assert {k: v for k, v in config["model"].items() if "pipeline" in k} == split
    assert "RA-L011" not in [f["code"] for f in answer["findings"]]


def test_a_layout_string_takes_no_split_settings_and_a_stale_split_goes():
    from service.recommend.config_build import _place_layers

    def placed(model: str, written: dict, **distributed) -> dict:
        config = {"model": dict(written), "distributed": distributed}
        _place_layers(config, find_bundled_model(model))
        return config["model"]

    assert placed("deepseek-v3", {"account_for_loss_in_pipeline_split": True},
                  pp_size=7, vp_size=7, pipeline_layout="explicit") == {}
    # llama3-8b's 32 layers: this split no longer places PP 4 (5 + 11 + 11 + 6 != 32 in even middles) ...
    assert placed("llama3-8b", {"num_layers_in_first_pipeline_stage": 5, "num_layers_in_last_pipeline_stage": 6},
                  pp_size=4) == {}
    # ... this one places PP 3, so it stays
    edges = {"num_layers_in_first_pipeline_stage": 10, "num_layers_in_last_pipeline_stage": 10}
    assert placed("llama3-8b", edges, pp_size=3) == edges
    assert placed("llama3-8b", {}, pp_size=3, vp_size=2) == {"num_layers_in_first_pipeline_stage": 10,
                                                             "num_layers_in_last_pipeline_stage": 10}


@pytest.mark.parametrize("overrides, split", [
    (["--distributed.vp_size", "2"], {"num_layers_in_first_pipeline_stage": 10,
                                      "num_layers_in_last_pipeline_stage": 10}),
    (["--distributed.vp_size", "null", "--distributed.pipeline_layout", "explicit"], {}),
    (["--distributed.vp_size", "null", "--model.num_layers_in_first_pipeline_stage", "12",
      "--model.num_layers_in_last_pipeline_stage", "8"],
     {"num_layers_in_first_pipeline_stage": 12, "num_layers_in_last_pipeline_stage": 8})])
def test_the_split_follows_the_layout_the_overrides_end_with(capsys, tmp_path, overrides, split):
    """The split was placed for the planner's layout before the overrides moved it."""
    out = tmp_path / "c.yaml"
    args = ["recommend", "--model", "llama3-8b", "--gpus", "3", "--gpu-type", "h100", "--goal", "pretrain",
            "-o", str(out), *overrides]
    assert main(args) == 0, capsys.readouterr().err
    model = yaml.safe_load(out.read_text())["model"]
    assert {k: v for k, v in model.items() if "pipeline" in k} == split
