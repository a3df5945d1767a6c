"""Validate reports what the bundled trainer refuses: sections and targets it cannot build, LoRA under tensor
parallel, sequence lengths beyond the model's positions."""

from __future__ import annotations

import pytest
import yaml

from service.validate.document import validate_text
from tests.paths import BUNDLED_RECIPES, RECIPES
from tests.service.validate.test_known_issues import severities

BUNDLED = (RECIPES / "bundled" / "tiny_llama_pretrain.yaml").read_text()


def e005(text: str) -> list[tuple[str, str]]:
    return [(f.severity, f.key) for f in validate_text(text, "c.yaml").findings if f.code == "RA-E005"]


def _validate(config: dict):
    from service.validate.document import validate_text

    return [f for f in validate_text(yaml.safe_dump(config, sort_keys=False), "c.yaml").findings if f.code == "RA-C011"]


def test_a_bundled_recipe_has_no_section_problem():
    assert e005(BUNDLED) == []


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("model:\n", "model:\n  foo_bar: 1\n", 1), [("error", "model")]),
    (lambda t: t.replace("model:\n", "model:\n  attn_implementation: flash_attention_9\n", 1),
     [("error", "model.attn_implementation")]),
    (lambda t: "\n".join(line for line in t.splitlines() if "_target_: trainer.data" not in line),
     [("warning", "dataset._target_"), ("warning", "validation_dataset._target_")]),
    (lambda t: "rng: {seed: 1}\n", [("warning", "model.pretrained_model_name_or_path")]),
])
def test_validate_reports_the_sections_the_trainer_refuses(edit, expected):
    assert e005(edit(BUNDLED)) == expected


def test_lora_with_tensor_parallel_is_refused_by_validate_and_the_dry_run(tmp_path, capsys):
    from service.cli.app import main

    config = tmp_path / "c.yaml"
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                 "--goal", "peft", "-o", str(config)]) == 0
    capsys.readouterr()
    text = config.read_text().replace("tp_size: 1", "tp_size: 2").replace("strategy: ddp", "strategy: fsdp2")
    assert ("error", "distributed.tp_size") in e005(text)
    config.write_text(text)
    assert main(["train", str(config), "--dry-run", "--ignore-validation-errors"]) == 2
    assert "distributed.tp_size: LoRA runs with data parallel only here" in capsys.readouterr().err


def test_an_explicit_null_target_is_an_error_and_a_fragment_still_reports_what_is_written_wrong():
    null = BUNDLED.replace("_target_: torch.optim.AdamW", "_target_: null")
    assert ("error", "optimizer._target_") in e005(null)
    fragment = "peft: {rank: 4, target_modules: [bogus_proj]}\n"
    assert e005(fragment) == [("warning", "model.pretrained_model_name_or_path"), ("error", "peft.target_modules")]


def test_a_target_path_too_long_or_private_is_refused_by_validate_and_the_trainer():


    from trainer.contract.builders import check_target
    from trainer.contract.overrides import ConfigError

    long_target = "trainer." + "a." * 3000 + "b"
    for target in (long_target, "trainer.data._check_seq_length"):
        text = f"optimizer:\n  _target_: {target}\n"
        assert severities(text, "RA-S001") == ["error"]
        with pytest.raises(ConfigError, match="not a dotted Python path"):
            check_target(target, "optimizer")
    assert severities("optimizer:\n  _target_: torch.optim.AdamW\n", "RA-S001") == []


def test_ra_c011_judges_the_validation_sequence_too():
    config = yaml.safe_load((BUNDLED_RECIPES / "tiny_llama_pretrain.yaml").read_text())
    assert _validate(config) == []
    config["validation_dataset"]["seq_length"] = 100000
    [finding] = _validate(config)
    line = yaml.safe_dump(config, sort_keys=False).splitlines().index("  seq_length: 100000") + 1
    assert (finding.severity, finding.key, finding.line) == ("error", "validation_dataset.seq_length", line)
    assert "100000" in finding.message and "256" in finding.message and "refuses" in finding.message
    assert "lower validation_dataset.seq_length to 256" in finding.fix
    config["dataset"]["seq_length"] = 1000
    assert [f.key for f in _validate(config)] == ["dataset.seq_length", "validation_dataset.seq_length"]


def test_ra_c011_stays_a_warning_for_megatron(tmp_path):
    config = yaml.safe_load((BUNDLED_RECIPES / "tiny_llama_pretrain.yaml").read_text())
    config["distributed"] = {"strategy": "megatron", "tp_size": 1}
    config["validation_dataset"]["seq_length"] = 100000
    [finding] = _validate(config)
    assert (finding.severity, finding.key) == ("warning", "validation_dataset.seq_length")
