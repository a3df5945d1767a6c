"""Context- and pipeline-parallel layouts the bundled trainer cannot run stop before launch, naming the key."""

from __future__ import annotations

import pytest

from tests.paths import BUNDLED_RECIPES
from trainer.contract.overrides import ConfigError
from trainer.contract.pipeline_split import stage_layer_counts
from trainer.contract.preflight import load_config, preflight

RECIPE = str(BUNDLED_RECIPES / "tiny_llama_pretrain.yaml")
NO_VALIDATION = ["--validation_dataset", "null"]


@pytest.mark.parametrize("overrides, world, message", [
    (["--distributed.cp_size", "2", "--dataset.seq_length", "62"], 2,
     "dataset.seq_length: 62 is not a multiple of 2 x distributed.cp_size = 4"),
    (["--distributed.cp_size", "2", "--validation_dataset.seq_length", "30"], 2,
     "validation_dataset.seq_length: 30 is not a multiple of 2 x distributed.cp_size = 4"),
    (["--distributed.pp_size", "4", *NO_VALIDATION], 4,
     "distributed.pp_size: 4 stages are deeper than the model's 2 decoder layers"),
    (["--distributed.pp_size", "2", "--distributed.vp_size", "2", *NO_VALIDATION], 2,
     "distributed.vp_size: 2 decoder layers do not split over pp_size 2 x vp_size 2 = 4 stages without leaving "
     "a stage empty; use a vp_size in [1]"),
    (["--distributed.vp_size", "2"], 2, "distributed.vp_size: 2 virtual stages need pipeline parallel"),
    (["--distributed.pp_size", "2", "--distributed.strategy", "ddp", *NO_VALIDATION], 2,
     "distributed.pp_size: pipeline parallel runs with strategy fsdp2"),
    (["--distributed.pp_size", "2", "--distributed.cp_size", "2", *NO_VALIDATION], 4,
     "distributed.pp_size: pipeline parallel does not combine with context parallel"),
    (["--distributed.pp_size", "2", "--distributed.tp_size", "2", *NO_VALIDATION], 4,
     "distributed.pp_size: pipeline parallel does not combine with tensor parallel"),
    (["--distributed.pp_size", "2", "--step_scheduler.global_batch_size", "4", *NO_VALIDATION], 2,
     "step_scheduler.global_batch_size: 4 gives 1 micro batch(es) of local_batch_size 4"),
    (["--distributed.cp_size", "4"], 2, "distributed.cp_size: tp_size x cp_size x pp_size = 1 x 4 x 1 = 4 does not "
                                        "divide the 2 processes"),
])
def test_preflight_refuses_layouts_the_trainer_cannot_run(overrides, world, message):
    _, cfg = load_config(RECIPE, overrides)
    with pytest.raises(ConfigError) as err:
        preflight(cfg, world)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("overrides, world", [
    (["--distributed.cp_size", "2"], 2),
    (["--distributed.cp_size", "2", "--distributed.tp_size", "2"], 4),
    (["--distributed.pp_size", "2", *NO_VALIDATION], 2),
    (["--distributed.pp_size", "2"], 2),  # validation runs through the pipeline's stages
    (["--distributed.pp_size", "2", *NO_VALIDATION], 4),
])
def test_preflight_accepts_the_layouts_the_trainer_runs(overrides, world):
    preflight(load_config(RECIPE, overrides)[1], world)


def test_the_workers_refuse_a_pipeline_over_tied_embeddings_and_too_few_layers_of_a_built_model():
    from trainer.models.presets import tiny_config
    from trainer.recipes.model_io import check_layout

    _, cfg = load_config(RECIPE, ["--distributed.pp_size", "2", *NO_VALIDATION])
    cfg.model.pretrained_model_name_or_path = "some-org/hub-model"  # depth known only once built
    check_layout(tiny_config("llama"), cfg)
    with pytest.raises(ConfigError, match="distributed.pp_size: this model ties its LM head"):
        check_layout(tiny_config("qwen3_tied"), cfg)
    cfg.distributed.pp_size = 3
    with pytest.raises(ConfigError, match="distributed.pp_size: 3 stages are deeper than the model's 2"):
        check_layout(tiny_config("llama"), cfg)


@pytest.mark.parametrize("layers, pp, vp, counts", [
    (2, 2, 1, [1, 1]),
    (3, 2, 1, [1, 2]),  # the embedding counted as a layer: the first stage is lighter
    (6, 2, 2, [1, 2, 2, 1]),  # embedding and loss counted, interleaved
    (16, 4, 2, [2] * 8),
    (2, 2, 2, None),  # a stage would be empty
    (3, 4, 1, None),
])
def test_stages_are_cut_where_megatron_splits_the_layers(layers, pp, vp, counts):
    assert stage_layer_counts(layers, pp, vp) == counts
    if counts is not None:
        assert sum(counts) == layers
