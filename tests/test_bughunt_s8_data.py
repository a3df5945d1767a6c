"""Bug hunt s8 (#1, #2): bundled stand-in recommendations whose data cannot carry the schedule, and
fine-tunes of published weights on the byte tokenizer.

- a tokenizer may name a model (bundled id or Hugging Face repo): its tokenizer.json comes from the
  Hugging Face cache, as the weights do (offline here: a fake cache in tmp_path);
- recommend gives fine-tunes of published weights the model's tokenizer; RA-D001 flags the byte one;
- a stand-in's mock data repeats to last the carried max_steps, a too-small SFT sample is said;
  RA-D002 flags mock data that ends a run early; the trainer warns when the data or the warmup
  does not fit the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.recommend import recommend
from service.validate import validate_text
from tests.trainer_harness import run_trainer, write_config
from trainer.config import parse_config
from trainer.data import JsonTokenizer, load_tokenizer
from trainer.launch import preflight
from trainer.overrides import ConfigError, FieldError
from trainer.step_scheduler import StepScheduler, steps_per_epoch

REPO = "tiny-org/tiny-tok"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An offline Hugging Face cache holding REPO's tokenizer.json and tokenizer_config.json."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    cache = tmp_path / "hub"
    repo_dir = cache / ("models--" + REPO.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / ("b" * 40)
    snapshot.mkdir(parents=True)
    tok = Tokenizer(WordLevel({"<unk>": 0, "hello": 1, "world": 2, "<|endoftext|>": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(snapshot / "tokenizer.json"))
    (snapshot / "tokenizer_config.json").write_text('{"eos_token": "<|endoftext|>"}')
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("b" * 40)
    import huggingface_hub.constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_tokenizer_may_name_a_model_whose_tokenizer_is_in_the_hub_cache(hub_cache):
    tok = load_tokenizer(REPO, "dataset.tokenizer")
    assert isinstance(tok, JsonTokenizer)
    assert tok.encode("hello world") == [1, 2] and tok.eos_id == 3  # the special token from tokenizer_config.json
    with pytest.raises(FieldError, match=r"tiny-org/absent's tokenizer.json is not in the Hugging Face cache "
                                         r"\(HF_HUB_OFFLINE is set\).*huggingface-cli download tiny-org/absent"):
        load_tokenizer("tiny-org/absent", "dataset.tokenizer")
    with pytest.raises(FieldError, match="not found"):  # neither a file nor a model name
        load_tokenizer("no-such-tokenizer.json")


def _tokenizer_config(tmp_path, tokenizer: str) -> dict:
    data = yaml.safe_load(write_config(tmp_path / tokenizer.replace("/", "_")).read_text())
    data["dataset"] = {"_target_": "trainer.data.JsonlSFTDataset", "seq_length": 8, "tokenizer": tokenizer,
                       "path": "recipe_index/data/tiny_sft.jsonl"}
    return data


def test_the_launch_preflight_leaves_a_model_tokenizer_to_the_workers_when_online(tmp_path, monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants as hub_constants

    def no_download(*args, **kwargs):
        raise AssertionError("the pre-flight must not download")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_download)
    preflight(parse_config(_tokenizer_config(tmp_path, "tiny-org/not-cached-here")), 2)  # the workers fetch it
    with pytest.raises(ConfigError, match=r"^dataset\.tokenizer: file 'missing/tokenizer\.json' not found"):
        preflight(parse_config(_tokenizer_config(tmp_path, "missing/tokenizer.json")), 2)  # a path: checked as before


def test_the_launch_preflight_asks_the_offline_cache_for_a_model_tokenizer(tmp_path, hub_cache):
    """Review s8 #4: offline, a repo-like name that is neither a path nor cached fails in the workers, so
    `--dry-run` refuses it; a cached one passes."""
    with pytest.raises(ConfigError, match=r"^dataset\.tokenizer: 'tokenizers/llama' is no file or folder here, "
                                          r"and tokenizers/llama's tokenizer.json is not in the Hugging Face cache"):
        preflight(parse_config(_tokenizer_config(tmp_path, "tokenizers/llama")), 2)
    preflight(parse_config(_tokenizer_config(tmp_path, REPO)), 2)


def _findings(text: str, code: str) -> list:
    return [f for f in validate_text(text, "c.yaml").findings if f.code == code]


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
    """Bug hunt s8c #7: RA-D001 looked only for the byte tokenizer."""
    config = yaml.safe_load(recommend("qwen25-7b", 8, "h100", engine="bundled", goal="sft").config_yaml)
    config["dataset"]["tokenizer"] = tokenizer
    found = _findings(yaml.safe_dump(config), "RA-D001")
    assert bool(found) is flagged
    if flagged:
        [finding] = found
        assert finding.key == "dataset.tokenizer" and "the weights' 152,064" in finding.message
        assert finding.fix == "set dataset.tokenizer: qwen25-7b"


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


class _Loader:
    def __init__(self, batches: int):
        self.batches = batches

    def __len__(self) -> int:
        return self.batches


def test_the_step_scheduler_says_when_the_data_or_the_warmup_does_not_fit_the_run():
    sched = StepScheduler(_Loader(8), global_batch_size=8, local_batch_size=2, dp_size=2, max_steps=100)
    assert sched.total_steps == 4
    ends, warmup = sched.length_warnings(warmup_steps=10)
    assert ends.startswith("the data ends the run after 4 steps (1 epoch(s) of 4), before step_scheduler.max_steps 100")
    assert warmup.startswith("lr_scheduler.warmup_steps 10 is longer than the run (4 steps)")
    assert StepScheduler(_Loader(8), global_batch_size=8, local_batch_size=2, dp_size=2,
                         max_steps=4).length_warnings(warmup_steps=2) == []


def test_a_real_run_warns_that_its_data_ends_it_before_max_steps(tmp_path):
    config = write_config(tmp_path, {"dataset": {"num_samples": 32},
                                     "step_scheduler": {"max_steps": 50, "checkpoint_interval": None},
                                     "lr_scheduler": {"warmup_steps": 20, "decay_steps": None},
                                     "checkpoint": {"enabled": False, "checkpoint_dir": "ckpt"}})
    result = run_trainer(config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "warning: the data ends the run after 4 steps (1 epoch(s) of 4), before step_scheduler.max_steps 50" \
        in result.stderr
    assert "warning: lr_scheduler.warmup_steps 20 is longer than the run (4 steps)" in result.stderr


def test_a_tokenizer_that_is_not_text_gets_the_path_error_not_a_traceback():
    with pytest.raises(FieldError, match="expected a file path, got 5"):
        load_tokenizer(5, "dataset.tokenizer")


def test_a_hub_config_is_returned_not_dropped(monkeypatch, tmp_path):
    """resolve_config of a repo id read the config.json and returned None (its return sat in another function)."""
    import trainer.models.builder as builder
    from tests.test_model_build import tiny_config, write_config as write_model

    path = write_model(tmp_path / "m", tiny_config("llama3")) / "config.json"
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda repo, name, **kw: str(path))
    config, weights = builder.resolve_config("tiny-org/some-model")
    assert config is not None and config.rope_type == "llama3" and weights is None


def test_ra_d001_names_the_folder_of_a_config_json_model():
    """Bug hunt s8c #6: the fix named the config.json itself as the tokenizer."""
    config = {"model": {"pretrained_model_name_or_path": "/models/m/config.json", "load_weights": True},
              "distributed": {"strategy": "fsdp2"}, "hardware": {"gpu_type": "h100", "gpus_per_node": 8},
              "dataset": {"_target_": "trainer.data.JsonlSFTDataset", "path": "sft.jsonl", "seq_length": 64},
              "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4}}
    [finding] = _findings(yaml.safe_dump(config), "RA-D001")
    assert "set dataset.tokenizer: /models/m (its tokenizer.json" in finding.fix


def test_a_stand_in_describes_the_data_the_overrides_leave():
    """Bug hunt s8c #5: the note and num_epochs were worked out before the overrides."""
    longer = recommend("qwen3-600m", 2, "cpu", engine="bundled", overrides=["--step_scheduler.max_steps", "900000"])
    assert any("to last the 900000 steps" in n for n in longer.notes)
    assert _findings(longer.config_yaml, "RA-D002") == []
    own = recommend("qwen3-600m", 2, "cpu", engine="bundled", overrides=[
        "--dataset", "{_target_: trainer.data.JsonlPretrainDataset, path: my.jsonl, seq_length: 4096}"])
    assert not [n for n in own.notes if "synthetic" in n or "small sample" in n]


def test_diff_reads_two_names_of_one_models_tokenizer_as_the_same():
    from service.changes import diff

    assert diff({"dataset": {"tokenizer": "qwen25-7b"}}, {"dataset": {"tokenizer": "Qwen/Qwen2.5-7B"}}) == []


def test_a_fine_tune_whose_contract_is_a_pretraining_recipe_says_so():
    """Bug hunt s8c #4: llama2-7b has only a pretraining library recipe; its values carried silently."""
    rec = recommend("llama2-7b", 8, "h100", engine="bundled", goal="sft")
    assert any(n.startswith("llama2_7b_pretrain") and "is a pretrain recipe (the index has no sft recipe for "
               "llama2-7b): its LR, steps, warmup and global batch are pretrain values" in n for n in rec.notes)
    same_goal = recommend("qwen25-7b", 8, "h100", engine="bundled", goal="sft")  # a library SFT recipe exists
    assert not [n for n in same_goal.notes if "is a pretrain recipe" in n]
