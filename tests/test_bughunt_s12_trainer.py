"""Bug hunts s12 and s12b (notes/hunt_s12.md, hunt_s12b.md), the trainer's side: what its config reader takes
(YAML 1.1 readings, dates, empty folders), its pre-flight (LoRA targets, override flags, an offline cache, pipes),
checkpoints (a lost peer inside a save, the tokenizer beside consolidated weights, LoRA setups on resume)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from service.cli import main
from tests.test_index_models import offline_hub  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[1]
BUNDLED_SFT = (REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml").read_text()


# ---- H15, H16, R2: values the two readers took differently, or YAML 1.1 guesses ------------------------------

def _trainer_reads(tmp_path, text: str):
    from trainer.launch import load_config
    from trainer.overrides import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(text)
    try:
        return load_config(str(path), [])[1]
    except ConfigError as err:
        return err


def test_an_empty_checkpoint_folder_is_refused_naming_the_key(tmp_path):
    from service.validate import validate_text

    text = BUNDLED_SFT.replace("checkpoint_dir: checkpoints/tiny_llama_sft", 'checkpoint_dir: ""')
    assert text != BUNDLED_SFT
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.severity == "error"]
    assert (finding.code, finding.key) == ("RA-C002", "checkpoint.checkpoint_dir")
    assert "working folder" in str(_trainer_reads(tmp_path, text))


def test_a_date_like_value_is_text_to_validate_and_to_the_trainer(tmp_path):
    from service.validate import validate_text

    text = BUNDLED_SFT.replace("checkpoint_dir: checkpoints/tiny_llama_sft", "checkpoint_dir: 2024-01-01")
    assert not [f for f in validate_text(text, "c.yaml").findings if f.severity == "error"]
    assert _trainer_reads(tmp_path, text).checkpoint.checkpoint_dir == "2024-01-01"


@pytest.mark.parametrize("written, value", [("064", 52), ("1:30", 90), ("0_100", 64)])
def test_yaml11_octal_and_base60_integers_are_refused_not_guessed(tmp_path, written, value):
    from service.validate import validate_text

    from service.yamlio import YamlError

    text = BUNDLED_SFT.replace("global_batch_size: 8", f"global_batch_size: {written}")
    assert text != BUNDLED_SFT
    with pytest.raises(YamlError, match=f"is {written!r}, which YAML 1.1 reads as .*: {value}") as refused:
        validate_text(text, "c.yaml")
    assert refused.value.line == 19 and str(value) in refused.value.fix
    assert "YAML 1.1" in str(_trainer_reads(tmp_path, text))
    for fine in ("0", "100", "0x40", "'064'"):
        validate_text(text.replace(f"global_batch_size: {written}", f"global_batch_size: {fine}"), "c.yaml")


@pytest.mark.parametrize("name, says", [("-", "train reads its config from a file"), (".", "a folder, not a config")])
def test_train_names_why_a_path_is_no_config(name, says):
    from trainer.overrides import ConfigError, load_yaml_file

    with pytest.raises(ConfigError, match=says):
        load_yaml_file(name)


@pytest.mark.parametrize("value", ["=", "<<"])
def test_a_bare_yaml11_special_key_as_a_value_says_quote_it(tmp_path, value):
    """Bug hunt s12 M20: `description: =` was refused as "YAML tag !!value is not allowed" (no tag was written)."""
    from service.validate import validate_text
    from service.yamlio import YamlError
    from trainer.overrides import ConfigError, coerce_value

    text = BUNDLED_SFT.replace("metadata:\n", f"metadata:\n  description: {value}\n", 1)
    with pytest.raises(YamlError, match="YAML 1.1 reads as a special key") as refused:
        validate_text(text, "c.yaml")
    assert refused.value.fix == f"quote it ('{value}') if it is text"
    assert "quote it" in str(_trainer_reads(tmp_path, text))
    with pytest.raises(ConfigError, match="quote it"):
        coerce_value(value)
    # a `<<` key still merges (final read s12 F4: this half asserted nothing)
    merged = BUNDLED_SFT.replace("dataloader:\n", "dataloader:\n  <<: {pin_memory: true}\n", 1)
    assert "<<:" in merged and _trainer_reads(tmp_path, merged).dataloader.pin_memory is True


def test_a_lost_peer_inside_a_checkpoint_save_is_named():
    """Review s12 F10: a survivor of a peer lost mid-save printed a traceback, not "another rank left"."""
    from torch.distributed.checkpoint.api import CheckpointException

    from trainer.dist import lost_peer

    assert lost_peer(CheckpointException("write", {1: (RuntimeError("Connection reset by peer"), None)}))
    assert not lost_peer(CheckpointException("write", {0: (OSError("No space left on device"), None)}))


def test_train_says_a_pipe_is_no_config_file():
    """Review s12 F15: `train <(recommend ... -o -)` was "config file not found"."""
    from trainer.overrides import ConfigError, load_yaml_file

    read, write = os.pipe()
    try:
        with pytest.raises(ConfigError, match="train reads its config from a file"):
            load_yaml_file(f"/proc/self/fd/{read}")
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("targets", [["q_proj", "v_prj"], ["q_proj", "embed_tokens"]])
def test_every_lora_target_must_adapt_a_linear(targets):
    """Bug hunt s12b B4: a typo beside a good entry trained nothing there, while adapter_config.json listed it."""
    from trainer.model_checks import check_peft_targets
    from trainer.models import build_causal_lm
    from trainer.overrides import ConfigError
    from trainer.peft import apply_lora

    with pytest.raises(ConfigError, match=targets[1]):
        check_peft_targets(targets, default_loader=True)
    with pytest.raises(ValueError, match=targets[1]):
        apply_lora(build_causal_lm("tiny-llama", device="meta"), rank=4, alpha=8, target_modules=targets)
    apply_lora(build_causal_lm("tiny-llama", device="meta"), rank=4, alpha=8, target_modules=["q_proj", "lm_head"])


@pytest.mark.parametrize("flag, value, says", [
    ("--optimizer.lr", "abc", "--optimizer.lr: Input should be a valid number"),
    ("--step_scheduler.max_stepz", "3", "--step_scheduler.max_stepz: unknown key")])
def test_a_bad_override_is_blamed_on_its_flag_not_the_file(flag, value, says):
    """Bug hunt s12b B3: the error named the config file, whose own value was fine."""
    from trainer.launch import load_config
    from trainer.overrides import ConfigError

    path = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    with pytest.raises(ConfigError) as refused:
        load_config(path, [flag, value])
    assert str(refused.value).startswith(says) and path not in str(refused.value)


def test_a_consolidated_checkpoint_carries_the_tokenizer_its_data_was_encoded_with(tmp_path):
    """Bug hunt s12b B1: fine-tuning from the trainer's own checkpoint could not name its tokenizer (RA-D001's fix
    `dataset.tokenizer: <folder>` was refused: no tokenizer.json there)."""
    from tests.trainer_harness import assert_clean_exit, run_trainer, write_config
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


def test_mock_data_leaves_no_tokenizer_and_a_model_tokenizer_is_copied(tmp_path):
    from trainer.tokenizer_files import save_tokenizer, training_tokenizer

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


@pytest.mark.parametrize("override, says", [
    (["--dataset.tokenizer", "Qwen/Qwen3-8B"], "dataset.tokenizer"),
    (["--model.pretrained_model_name_or_path", "qwen3-600m", "--model.load_weights", "true"], "model.load_weights")])
def test_dry_run_offline_refuses_what_the_cache_lacks_for_a_bundled_model(offline_hub, capsys,  # noqa: F811
                                                                        override, says):
    """Bug hunt s12b B6: a bundled model's tokenizer and weights come from the cache too; the workers refused them."""
    sft = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml")
    assert main(["train", sft, "--dry-run", *override]) == 2
    assert says in capsys.readouterr().err


def test_lora_targets_that_select_the_same_modules_are_one_setup():
    """Bug hunt s12b B5: a repeated name or a dotted suffix was "another PEFT setup" on resume."""
    from trainer.checkpoint import model_signature

    lora = {"method": "lora", "rank": 8, "alpha": 16}
    plain = model_signature(None, {**lora, "target_modules": ["q_proj", "v_proj"]})["peft"]
    for same in (["v_proj", "q_proj", "q_proj"], ["self_attn.q_proj", "v_proj"]):
        assert model_signature(None, {**lora, "target_modules": same})["peft"] == plain
    assert model_signature(None, {**lora, "target_modules": ["q_proj", "k_proj"]})["peft"] != plain


def test_torchruns_spelling_of_a_launcher_flag_is_named(capsys):
    """Bug hunt s12b B3: `--nproc_per_node 1` was an unknown key of the config file."""
    config = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    assert main(["train", config, "--dry-run", "--nproc_per_node", "1"]) == 2
    assert "--nproc_per_node: a launcher flag is spelt --nproc-per-node here" in capsys.readouterr().err


# ---- final read s12 (notes/final_read_s12.md) -------------------------------------------------------------------

def test_a_model_tokenizer_is_copied_from_the_cache_the_run_filled(offline_hub, tmp_path):  # noqa: F811
    """Offline, the cache the run filled is where a model's tokenizer is copied from (online: the test below)."""
    from tests.test_index_models import _cache_repo
    from trainer.tokenizer_files import save_tokenizer

    _cache_repo(offline_hub, "acme-s12/tiny", {})
    snapshot = next((offline_hub / "models--acme-s12--tiny" / "snapshots").iterdir())
    (snapshot / "tokenizer.json").write_text('{"model": "from the cache"}')
    out = tmp_path / "out"
    out.mkdir()
    save_tokenizer("acme-s12/tiny", out)
    assert (out / "tokenizer.json").read_text() == '{"model": "from the cache"}'


def test_the_saved_byte_tokenizer_reads_special_token_names_as_text(tmp_path):
    """Final read s12 F9: text holding `<s>` got the special id, where the byte tokenizer reads bytes."""
    from trainer.data import ByteTokenizer, load_tokenizer
    from trainer.tokenizer_files import save_tokenizer

    save_tokenizer("byte", tmp_path)
    saved, byte = load_tokenizer(str(tmp_path)), ByteTokenizer()
    for text in ("<s>hello</s><pad>", "plain ✓"):
        assert saved.encode(text) == byte.encode(text)
    assert (saved.bos_id, saved.eos_id, saved.pad_id) == (byte.bos_id, byte.eos_id, byte.pad_id)


def test_a_lora_target_of_one_layer_is_another_setup_than_every_layer():
    """Final read s12 F3: `model.layers.0.self_attn.q_proj` was folded to `q_proj`."""
    from trainer.checkpoint import model_signature

    lora = {"method": "lora", "rank": 8, "alpha": 16}
    one = model_signature(None, {**lora, "target_modules": ["model.layers.0.self_attn.q_proj"]})["peft"]
    assert one != model_signature(None, {**lora, "target_modules": ["q_proj"]})["peft"]


@pytest.mark.parametrize("target", ["self_atn.q_proj", "mlp.q_proj", "layers.x.self_attn.q_proj"])
def test_a_dotted_lora_target_the_decoder_lacks_is_refused_before_launch(target):
    """Final read s12 F6: only the last name was checked; the workers refused it after start-up."""
    from trainer.model_checks import check_peft_targets
    from trainer.overrides import ConfigError

    with pytest.raises(ConfigError, match="matches no linear layer"):
        check_peft_targets(["q_proj", target], default_loader=True)
    check_peft_targets(["model.layers.3.self_attn.q_proj", "mlp.down_proj", "lm_head"], default_loader=True)


def test_offline_a_hub_repo_without_cached_weights_is_refused_before_launch(offline_hub):  # noqa: F811
    """Final read s12 F8: only bundled cards had their weights looked up."""
    from tests.test_index_models import _cache_repo
    from trainer.model_checks import check_model_source
    from trainer.overrides import ConfigError

    _cache_repo(offline_hub, "acme-s12/weightless", {})
    check_model_source("acme-s12/weightless")  # its config is cached: enough without load_weights
    with pytest.raises(ConfigError, match="model.load_weights"):
        check_model_source("acme-s12/weightless", weights=True)



def test_online_a_model_tokenizer_comes_from_the_cache_without_a_network_call(offline_hub, tmp_path,  # noqa: F811
                                                                             monkeypatch):
    """Every checkpoint save copies it: no Hub round trip (an air-gapped cluster would wait on each)."""
    from huggingface_hub import constants

    from tests.test_index_models import _cache_repo
    from trainer.tokenizer_files import save_tokenizer

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: pytest.fail("a network call"))
    _cache_repo(offline_hub, "acme-s12/online", {})
    (next((offline_hub / "models--acme-s12--online" / "snapshots").iterdir()) / "tokenizer.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    assert save_tokenizer("acme-s12/online", out) is None and (out / "tokenizer.json").read_text() == "{}"
    warning = save_tokenizer("acme-s12/absent", out)
    assert warning and "not in the Hugging Face cache" in warning


@pytest.mark.parametrize("flags, says", [
    (["--nnodes", "2", "--rdzv-endpoint", "h:29500", "--node-rank", "5"], "--node-rank 5: ranks of 2 node(s)"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:99999"], "a port from 1 to 65535"),
    (["--rdzv-endpoint", "h:29500"], "are for --nnodes > 1")])
def test_rendezvous_flags_torchrun_would_refuse_are_refused_before_it(capsys, flags, says):
    """Bug hunt s12 M16: they passed --dry-run (and a standalone launch dropped them silently)."""
    config = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    assert main(["train", config, "--dry-run", *flags]) == 2
    assert says in capsys.readouterr().err


# ---- last read s12 (notes/last_read_s12.md) ---------------------------------------------------------------------

@pytest.mark.parametrize("target", ["layers.01.mlp.up_proj", "layers.\uff11.mlp.up_proj", "layers.\u00b2.mlp.up_proj"])
def test_a_layer_index_no_module_has_is_refused_before_launch(target):
    """Last read s12 L3: str.isdigit() took `01`, a fullwidth or a superscript digit as a layer index."""
    from trainer.model_checks import check_peft_targets
    from trainer.overrides import ConfigError

    with pytest.raises(ConfigError, match="matches no linear layer"):
        check_peft_targets([target], default_loader=True)


def test_spellings_of_one_layer_target_are_one_setup():
    """Last read s12 L4: the same one-layer module spelt two ways, or inside an every-layer target."""
    from trainer.checkpoint import model_signature

    def signature(targets):
        return model_signature(None, {"method": "lora", "rank": 8, "alpha": 16, "target_modules": targets})["peft"]

    assert signature(["layers.1.mlp.up_proj"]) == signature(["model.layers.1.mlp.up_proj"])
    assert signature(["q_proj", "model.layers.0.self_attn.q_proj"]) == signature(["q_proj"])
    assert signature(["layers.1.mlp.up_proj"]) != signature(["layers.0.mlp.up_proj"])


def test_the_byte_tokenizer_json_alone_keeps_its_specials(tmp_path):
    """Last read s12 L6: without its tokenizer_config.json the renamed specials were not found."""
    import shutil

    from trainer.data import ByteTokenizer, load_tokenizer
    from trainer.tokenizer_files import save_tokenizer

    save_tokenizer("byte", tmp_path)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "tokenizer.json", alone / "tokenizer.json")
    saved, byte = load_tokenizer(str(alone / "tokenizer.json")), ByteTokenizer()
    assert (saved.bos_id, saved.eos_id, saved.pad_id) == (byte.bos_id, byte.eos_id, byte.pad_id)


@pytest.mark.parametrize("written, fix", [('!!int "0100"', "drop the !!int tag"), ("!!int 0100", "without a !!int tag"),
                                          ("0100", "quote it ('0100')")])
def test_an_octal_looking_text_is_told_how_to_stay_text(written, fix):
    """Last read s12 L7: a tagged plain octal was told to quote it, which the tag refuses again."""
    from service.validate import validate_text
    from service.yamlio import YamlError

    text = BUNDLED_SFT.replace("global_batch_size: 8", f"global_batch_size: {written}")
    with pytest.raises(YamlError) as refused:
        validate_text(text, "c.yaml")
    assert fix in refused.value.fix



def test_an_uncached_model_tokenizer_offline_is_one_warning_not_an_error(offline_hub, tmp_path):  # noqa: F811
    """Last read s12 L10: offline, the lookup raised where it should warn (once per run, not at every save)."""
    from trainer.tokenizer_files import save_tokenizer

    first, second = save_tokenizer("acme-s12/gone", tmp_path), save_tokenizer("acme-s12/gone", tmp_path)
    assert "not in the Hugging Face cache" in first and second is None


def test_a_bare_rendezvous_host_takes_torchruns_default_port(capsys):
    """Last read s12 L9: torchrun accepts HOST alone (port 29400)."""
    config = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml")
    assert main(["train", config, "--dry-run", "--nnodes", "2", "--rdzv-endpoint", "node0"]) == 0
    assert "--rdzv-endpoint=node0" in capsys.readouterr().out


def test_a_layer_past_the_model_is_refused_by_dry_run(capsys):
    """Last read s12 L3: `model.layers.9...` on a 2-layer model passed the pre-flight; the workers refused it."""
    sft = str(REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml")
    assert main(["train", sft, "--dry-run", "--peft.target_modules", "[q_proj, model.layers.9.self_attn.q_proj]"]) == 2
    assert "model.layers.9.self_attn.q_proj" in capsys.readouterr().err
    assert main(["train", sft, "--dry-run", "--peft.target_modules", "[q_proj, model.layers.1.self_attn.q_proj]"]) == 0
