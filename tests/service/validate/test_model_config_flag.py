"""`--model-config config.json` (or `model.config` in the file) gives the rules that need the architecture a model
the index has no card for, offline."""

from __future__ import annotations

import json

from service.validate.document import config_json_resolver, validate_text
from tests.cli import run_cli

# 30 layers and 6 KV heads: TP 4 breaks the KV heads (RA-L002), PP 4 the layer split (RA-L011)
HF_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1536,
             "num_hidden_layers": 30, "num_attention_heads": 12, "num_key_value_heads": 6,
             "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 4096}
CONFIG = """model:
  pretrained_model_name_or_path: some-lab/brand-new-model
{extra}distributed:
  strategy: megatron
  tp_size: 4
  sequence_parallel: true
hardware:
  gpu_type: h100
  gpus_per_node: 8
dataset:
  seq_length: 4096
"""


def _write(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
    return tmp_path / "config.json"


def test_without_a_card_the_architecture_rules_are_skipped(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    codes = {f.code for f in validate_text(CONFIG.format(extra=""), "c.yaml").findings}
    assert "RA-C009" in codes and "RA-L002" not in codes


def test_the_resolver_reads_the_config_json_under_the_configs_name(tmp_path):
    report = validate_text(CONFIG.format(extra=""), "c.yaml", resolve_model=config_json_resolver(str(_write(tmp_path))))
    (error,) = [f for f in report.findings if f.code == "RA-L002"]
    assert "some-lab/brand-new-model" in error.message and "RA-C009" not in {f.code for f in report.findings}


def test_model_config_in_the_file_is_read_relative_to_it(tmp_path):
    _write(tmp_path)
    path = tmp_path / "recipe.yaml"
    path.write_text(CONFIG.format(extra="  config: config.json\n"))
    from service.validate.document import validate_file

    assert "RA-L002" in {f.code for f in validate_file(str(path)).findings}


def test_the_cli_flag_and_a_missing_file(tmp_path, capsys):
    path = tmp_path / "recipe.yaml"
    path.write_text(CONFIG.format(extra=""))
    code, out, _ = run_cli(capsys, "validate", str(path), "--model-config", str(_write(tmp_path)), "--format", "json")
    assert code == 1 and "RA-L002" in {f["code"] for f in json.loads(out)["files"][0]["findings"]}
    code, _, err = run_cli(capsys, "validate", str(path), "--model-config", str(tmp_path / "nope.json"))
    assert code == 2 and "--model-config" in err
