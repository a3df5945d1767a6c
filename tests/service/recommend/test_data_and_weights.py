"""What a recommended run trains on and starts from: stand-in data that lasts the schedule, published weights
and their tokenizer, local folders with or without weights, a config the bundled trainer's pre-flight takes."""

from __future__ import annotations

import pytest
import yaml

from recipe_index import resolve_model
from service.recommend.recommendation import recommend
from service.validate.document import validate_text
from tests.hub_cache import cache_repo
from trainer.contract.step_scheduler import steps_per_epoch


def _findings(text: str, code: str) -> list:
    return [f for f in validate_text(text, "c.yaml").findings if f.code == code]


def test_bundled_fine_tuning_starts_from_the_published_weights():
    # LoRA and SFT used to train a randomly initialised model.
    for goal in ("sft", "peft"):
        rec = recommend("llama3-8b", 8, "h100", engine="bundled", goal=goal)
        assert rec.config["model"]["load_weights"] is True
        assert any("meta-llama/Meta-Llama-3-8B's weights" in n for n in rec.notes)
    pretrain = recommend("llama3-8b", 8, "h100", engine="bundled")
    assert "load_weights" not in pretrain.config["model"]
    tiny = recommend("tiny-llama", 2, "cpu", engine="bundled", goal="sft")
    assert "load_weights" not in tiny.config["model"]
    assert any("no published weights" in n for n in tiny.notes)


def test_a_local_model_loads_weights_only_when_they_lie_beside_its_config(tmp_path):
    # A folder with only config.json got load_weights: true, which the workers refuse.
    import shutil

    from recipe_index.models import MODELS_DIR

    folder = tmp_path / "my-model"
    folder.mkdir()
    shutil.copy(MODELS_DIR / "tiny-llama.json", folder / "config.json")
    bare = recommend(str(folder), 2, "cpu", engine="bundled", goal="sft")
    assert "load_weights" not in bare.config["model"]
    assert any("no safetensors beside" in n for n in bare.notes)
    (folder / "model.safetensors").write_bytes(b"")
    weighted = recommend(str(folder), 2, "cpu", engine="bundled", goal="sft")
    assert weighted.config["model"]["load_weights"] is True
    assert any(f"weights in {folder}" in n for n in weighted.notes)


def test_an_adapter_file_alone_is_no_model_weights(tmp_path):
    # Recommend now asks the loader's own has_hf_weights; any *.safetensors used to count.
    import shutil

    from recipe_index.models import MODELS_DIR

    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(MODELS_DIR / "tiny-llama.json", folder / "config.json")
    (folder / "adapter_model.safetensors").write_bytes(b"")
    assert "load_weights" not in recommend(str(folder), 2, "cpu", engine="bundled", goal="sft").config["model"]


@pytest.mark.parametrize("model, gpus, gpu_type, goal", [
    ("qwen25-7b", 8, "h100", "pretrain"),  # a card that declares no max_position_embeddings
    ("llama3-8b", 8, "h100", "peft"),
    ("tiny-llama", 2, "cpu", "sft"),
    ("qwen3-8b", 16, "a100-40gb", "sft"),
])
def test_what_recommend_writes_for_the_bundled_trainer_passes_its_preflight(tmp_path, offline_hub, model, gpus,
                                                                            gpu_type, goal):
    # Validate passed configs that the trainer's pre-flight then refused. Offline, the pre-flight
    # also asks the Hugging Face cache for the published tokenizer and weights SFT/PEFT start from:
    # here the cache holds them, as it must before such a run.
    from trainer.contract.preflight import load_config, preflight

    hf_id = resolve_model(model).hf_id
    if hf_id:
        cache_repo(offline_hub, hf_id, {})
        snapshot = next((offline_hub / ("models--" + hf_id.replace("/", "--")) / "snapshots").iterdir())
        (snapshot / "tokenizer.json").write_text("{}")
        (snapshot / "model.safetensors").write_bytes(b"")
    rec = recommend(model, gpus, gpu_type, engine="bundled", goal=goal)
    assert rec.errors == 0
    path = tmp_path / "c.yaml"
    path.write_text(rec.config_yaml)
    _, cfg = load_config(str(path), [])
    preflight(cfg, rec.plan.request.world_size)


def test_fine_tuning_published_weights_uses_their_tokenizer():
    rec = recommend("qwen3-8b", 8, "h100", engine="bundled", goal="peft")
    assert rec.config["model"]["load_weights"] is True
    assert rec.config["dataset"]["tokenizer"] == rec.config["validation_dataset"]["tokenizer"] == "Qwen/Qwen3-8B"
    assert any("the tokenizer the weights were trained with" in note for note in rec.notes)
    assert _findings(rec.config_yaml, "RA-D001") == []
    byte = yaml.safe_load(rec.config_yaml)
    byte["dataset"]["tokenizer"] = "byte"
    [finding] = _findings(yaml.safe_dump(byte), "RA-D001")
    assert finding.key == "dataset.tokenizer" and "set dataset.tokenizer: qwen3-8b" in finding.fix
    # No weights loaded: the byte tokenizer is fine (tiny-llama trains from scratch on its own sample).
    assert _findings(recommend("tiny-llama", 2, "cpu", engine="bundled", goal="sft").config_yaml, "RA-D001") == []


@pytest.mark.parametrize("tokenizer, flagged", [
    ("meta-llama/Meta-Llama-3-8B", True),   # 128,256 ids for a 152,064-row embedding
    ("llama2-7b", True),
    ("qwen25-500m", False),                 # the same tokenizer, its embedding padded to 151,936 rows
    ("Qwen/Qwen2.5-7B", False),
    ("some-org/unbundled-model", False),    # not a bundled card: validate reads no files to judge it
])
def test_another_models_tokenizer_is_flagged_when_its_vocabulary_differs(tokenizer, flagged):
    """RA-D001 looked only for the byte tokenizer."""
    config = yaml.safe_load(recommend("qwen25-7b", 8, "h100", engine="bundled", goal="sft").config_yaml)
    config["dataset"]["tokenizer"] = tokenizer
    found = _findings(yaml.safe_dump(config), "RA-D001")
    assert bool(found) is flagged
    if flagged:
        [finding] = found
        assert finding.key == "dataset.tokenizer" and "the weights' 152,064" in finding.message
        assert finding.fix == "set dataset.tokenizer: qwen25-7b"


def test_ra_d001_names_the_folder_of_a_config_json_model():
    """The fix named the config.json itself as the tokenizer."""
    config = {"model": {"pretrained_model_name_or_path": "/models/m/config.json", "load_weights": True},
              "distributed": {"strategy": "fsdp2"}, "hardware": {"gpu_type": "h100", "gpus_per_node": 8},
              "dataset": {"_target_": "trainer.data.JsonlSFTDataset", "path": "sft.jsonl", "seq_length": 64},
              "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4}}
    [finding] = _findings(yaml.safe_dump(config), "RA-D001")
    assert "set dataset.tokenizer: /models/m (its tokenizer.json" in finding.fix


def test_a_stand_in_pretrain_repeats_its_mock_data_to_last_the_library_schedule():
    rec = recommend("llama3-8b", 8, "h100", nodes=2, engine="bundled")
    s, lay = rec.config["step_scheduler"], rec.best.layout
    per_epoch = steps_per_epoch(rec.config["dataset"]["num_samples"], s["global_batch_size"], s["local_batch_size"],
                                lay.dp(16))
    assert s["num_epochs"] * per_epoch >= s["max_steps"] > (s["num_epochs"] - 1) * per_epoch
    assert any("repeated for" in n and "JsonlPretrainDataset" in n for n in rec.notes)
    assert _findings(rec.config_yaml, "RA-D002") == []
    one_epoch = yaml.safe_load(rec.config_yaml)
    one_epoch["step_scheduler"]["num_epochs"] = 1
    [finding] = _findings(yaml.safe_dump(one_epoch), "RA-D002")
    assert f"ends the run after {per_epoch} steps" in finding.message and "never reaches its peak" in finding.message
    assert f"num_epochs: {s['num_epochs']}" in finding.fix


def test_a_stand_in_sft_says_when_its_sample_cannot_carry_the_batch():
    rec = recommend("qwen25-7b", 8, "h100", engine="bundled", goal="sft")
    assert any("96 rows are fewer than one global batch of 128: the run starts only with your data" in n
               for n in rec.notes)


def test_a_stand_in_describes_the_data_the_overrides_leave():
    """The note and num_epochs were worked out before the overrides."""
    longer = recommend("qwen3-600m", 2, "cpu", engine="bundled", overrides=["--step_scheduler.max_steps", "900000"])
    assert any("to last the 900000 steps" in n for n in longer.notes)
    assert _findings(longer.config_yaml, "RA-D002") == []
    own = recommend("qwen3-600m", 2, "cpu", engine="bundled", overrides=[
        "--dataset", "{_target_: trainer.data.JsonlPretrainDataset, path: my.jsonl, seq_length: 4096}"])
    assert not [n for n in own.notes if "synthetic" in n or "small sample" in n]
