"""Tokenizers a run names and saves: a model's tokenizer from the Hugging Face cache (offline and online without
a network call), the byte tokenizer saved beside consolidated weights, special token names read as text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.trainer.harness import write_config
from trainer.contract.config import parse_config
from trainer.contract.overrides import ConfigError, FieldError
from trainer.contract.preflight import preflight
from trainer.data import JsonTokenizer, load_tokenizer

HUB_REPO = "tiny-org/tiny-tok"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An offline Hugging Face cache holding HUB_REPO's tokenizer.json and tokenizer_config.json."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    cache = tmp_path / "hub"
    repo_dir = cache / ("models--" + HUB_REPO.replace("/", "--"))
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


def _tokenizer_config(tmp_path, tokenizer: str) -> dict:
    data = yaml.safe_load(write_config(tmp_path / tokenizer.replace("/", "_")).read_text())
    data["dataset"] = {"_target_": "trainer.data.JsonlSFTDataset", "seq_length": 8, "tokenizer": tokenizer,
                       "path": "recipe_index/data/tiny_sft.jsonl"}
    return data


def test_a_consolidated_checkpoint_carries_the_tokenizer_its_data_was_encoded_with(tmp_path):
    """Fine-tuning from the trainer's own checkpoint could not name its tokenizer (RA-D001's fix
    `dataset.tokenizer: <folder>` was refused: no tokenizer.json there)."""
    from tests.trainer.harness import assert_clean_exit, run_trainer, write_config
    from trainer.data import ByteTokenizer, load_tokenizer

    data = tmp_path / "text.jsonl"
    data.write_text("".join(json.dumps({"text": f"sample {i}: héllo wörld ✓ " * 4}) + "\n" for i in range(64)))
    config = write_config(tmp_path, {"step_scheduler": {"max_steps": 1, "checkpoint_interval": 1}})
    settings = yaml.safe_load(config.read_text())
    settings["dataset"] = {"_target_": "trainer.data.JsonlPretrainDataset", "path": str(data), "seq_length": 32}
    config.write_text(yaml.safe_dump(settings))
    assert_clean_exit(run_trainer(config, nproc=0))
    folder = tmp_path / "ckpt" / "epoch_0_step_1" / "model" / "consolidated"
    tokenizer, byte = load_tokenizer(str(folder), "dataset.tokenizer"), ByteTokenizer()
    text = "ab ✓ 日本\n\tz"
    assert tokenizer.encode(text) == byte.encode(text) and tokenizer.decode(byte.encode(text)) == text
    assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) == (byte.bos_id, byte.eos_id, byte.pad_id)
    # config.json had eos_token_id null, so generate() on the checkpoint never stopped
    config = json.loads((folder / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (
        byte.bos_id, byte.eos_id, byte.pad_id)


@pytest.mark.parametrize("model_eos, written_eos", [(None, 3), (2, 3), ([3, 5], [3, 5]), ([5], 3)])
def test_the_consolidated_config_names_the_special_ids_of_the_tokenizer_beside_it(tmp_path, model_eos,
                                                                                   written_eos):
    """The tokenizer's EOS replaces the model's unless the model's list already holds it; a tokenizer without
    a BOS or a PAD token leaves those keys as the model's config has them."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from trainer.components.hf_io import write_special_token_ids

    Tokenizer(WordLevel({"<unk>": 0, "hello": 1, "world": 2, "<|endoftext|>": 3}, unk_token="<unk>")).save(
        str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "<|endoftext|>"}')
    (tmp_path / "config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": model_eos,
                                                      "pad_token_id": None, "vocab_size": 4}))
    write_special_token_ids(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text()) == {
        "bos_token_id": 1, "eos_token_id": written_eos, "pad_token_id": None, "vocab_size": 4}


def test_mock_data_leaves_no_tokenizer_and_a_model_tokenizer_is_copied(tmp_path):
    from trainer.contract.tokenizer_files import save_tokenizer, training_tokenizer

    class Section:
        def __init__(self, target, **kwargs):
            self.target, self._kwargs = target, kwargs

        def kwargs(self):
            return self._kwargs

    assert training_tokenizer(Section("trainer.data.MockDataset")) is None
    assert training_tokenizer(Section("trainer.data.JsonlSFTDataset", path="x")) == "byte"
    source = tmp_path / "src"
    source.mkdir()
    (source / "tokenizer.json").write_text("{}")
    (source / "tokenizer_config.json").write_text('{"eos_token": "</s>"}')
    out = tmp_path / "out"
    out.mkdir()
    save_tokenizer(str(source / "tokenizer.json"), out)
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]


def test_a_model_tokenizer_is_copied_from_the_cache_the_run_filled(offline_hub, tmp_path):
    """Offline, the cache the run filled is where a model's tokenizer is copied from (online: the test below)."""
    from tests.hub_cache import cache_repo
    from trainer.contract.tokenizer_files import save_tokenizer

    cache_repo(offline_hub, "acme/tiny", {})
    snapshot = next((offline_hub / "models--acme--tiny" / "snapshots").iterdir())
    (snapshot / "tokenizer.json").write_text('{"model": "from the cache"}')
    out = tmp_path / "out"
    out.mkdir()
    save_tokenizer("acme/tiny", out)
    assert (out / "tokenizer.json").read_text() == '{"model": "from the cache"}'


def test_the_saved_byte_tokenizer_reads_special_token_names_as_text(tmp_path):
    """Text holding `<s>` got the special id, where the byte tokenizer reads bytes."""
    from trainer.contract.tokenizer_files import save_tokenizer
    from trainer.data import ByteTokenizer, load_tokenizer

    save_tokenizer("byte", tmp_path)
    saved, byte = load_tokenizer(str(tmp_path)), ByteTokenizer()
    for text in ("<s>hello</s><pad>", "plain ✓"):
        assert saved.encode(text) == byte.encode(text)
    assert (saved.bos_id, saved.eos_id, saved.pad_id) == (byte.bos_id, byte.eos_id, byte.pad_id)


def test_online_a_model_tokenizer_comes_from_the_cache_without_a_network_call(offline_hub, tmp_path,
                                                                             monkeypatch):
    """Every checkpoint save copies it: no Hub round trip (an air-gapped cluster would wait on each)."""
    from huggingface_hub import constants

    from tests.hub_cache import cache_repo
    from trainer.contract.tokenizer_files import save_tokenizer

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: pytest.fail("a network call"))
    cache_repo(offline_hub, "acme/online", {})
    (next((offline_hub / "models--acme--online" / "snapshots").iterdir()) / "tokenizer.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    assert save_tokenizer("acme/online", out) is None and (out / "tokenizer.json").read_text() == "{}"
    warning = save_tokenizer("acme/absent", out)
    assert warning and "not in the Hugging Face cache" in warning


def test_the_byte_tokenizer_json_alone_keeps_its_specials(tmp_path):
    """Without its tokenizer_config.json the renamed specials were not found."""
    import shutil

    from trainer.contract.tokenizer_files import save_tokenizer
    from trainer.data import ByteTokenizer, load_tokenizer

    save_tokenizer("byte", tmp_path)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "tokenizer.json", alone / "tokenizer.json")
    saved, byte = load_tokenizer(str(alone / "tokenizer.json")), ByteTokenizer()
    assert (saved.bos_id, saved.eos_id, saved.pad_id) == (byte.bos_id, byte.eos_id, byte.pad_id)


def test_an_uncached_model_tokenizer_offline_is_one_warning_not_an_error(offline_hub, tmp_path):
    """Offline, the lookup raised where it should warn (once per run, not at every save)."""
    from trainer.contract.tokenizer_files import save_tokenizer

    first, second = save_tokenizer("acme/gone", tmp_path), save_tokenizer("acme/gone", tmp_path)
    assert "not in the Hugging Face cache" in first and second is None


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
    """Offline, a repo-like name that is neither a path nor cached fails in the workers, so
    `--dry-run` refuses it; a cached one passes."""
    with pytest.raises(ConfigError, match=r"^dataset\.tokenizer: 'tokenizers/llama' is no file or folder here, "
                                          r"and tokenizers/llama's tokenizer.json is not in the Hugging Face cache"):
        preflight(parse_config(_tokenizer_config(tmp_path, "tokenizers/llama")), 2)
    preflight(parse_config(_tokenizer_config(tmp_path, HUB_REPO)), 2)


def test_a_tokenizer_may_name_a_model_whose_tokenizer_is_in_the_hub_cache(hub_cache):
    tok = load_tokenizer(HUB_REPO, "dataset.tokenizer")
    assert isinstance(tok, JsonTokenizer)
    assert tok.encode("hello world") == [1, 2] and tok.eos_id == 3  # the special token from tokenizer_config.json
    with pytest.raises(FieldError, match=r"tiny-org/absent's tokenizer.json is not in the Hugging Face cache "
                                         r"\(HF_HUB_OFFLINE is set\).*huggingface-cli download tiny-org/absent"):
        load_tokenizer("tiny-org/absent", "dataset.tokenizer")
    with pytest.raises(FieldError, match="not found"):  # neither a file nor a model name
        load_tokenizer("no-such-tokenizer.json")


def test_a_tokenizer_that_is_not_text_gets_the_path_error_not_a_traceback():
    with pytest.raises(FieldError, match="expected a file path, got 5"):
        load_tokenizer(5, "dataset.tokenizer")
