"""Validate and the trainer read a config alike: YAML 1.1's octal and base-60 integers refused, dates and
special keys as text, an empty checkpoint folder named."""

from __future__ import annotations

import pytest

from tests.paths import REPO

BUNDLED_SFT = (REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml").read_text()


def _trainer_reads(tmp_path, text: str):
    from trainer.contract.overrides import ConfigError
    from trainer.contract.preflight import load_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    try:
        return load_config(str(path), [])[1]
    except ConfigError as err:
        return err


def test_an_empty_checkpoint_folder_is_refused_naming_the_key(tmp_path):
    from service.validate.document import validate_text

    text = BUNDLED_SFT.replace("checkpoint_dir: checkpoints/tiny_llama_sft", 'checkpoint_dir: ""')
    assert text != BUNDLED_SFT
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.severity == "error"]
    assert (finding.code, finding.key) == ("RA-C002", "checkpoint.checkpoint_dir")
    assert "working folder" in str(_trainer_reads(tmp_path, text))


def test_a_date_like_value_is_text_to_validate_and_to_the_trainer(tmp_path):
    from service.validate.document import validate_text

    text = BUNDLED_SFT.replace("checkpoint_dir: checkpoints/tiny_llama_sft", "checkpoint_dir: 2024-01-01")
    assert not [f for f in validate_text(text, "c.yaml").findings if f.severity == "error"]
    assert _trainer_reads(tmp_path, text).checkpoint.checkpoint_dir == "2024-01-01"


@pytest.mark.parametrize("written, value", [("064", 52), ("1:30", 90), ("0_100", 64)])
def test_yaml11_octal_and_base60_integers_are_refused_not_guessed(tmp_path, written, value):
    from service.configs.yamlio import YamlError
    from service.validate.document import validate_text

    text = BUNDLED_SFT.replace("global_batch_size: 8", f"global_batch_size: {written}")
    assert text != BUNDLED_SFT
    with pytest.raises(YamlError, match=f"is {written!r}, which YAML 1.1 reads as .*: {value}") as refused:
        validate_text(text, "c.yaml")
    assert refused.value.line == 19 and str(value) in refused.value.fix
    assert "YAML 1.1" in str(_trainer_reads(tmp_path, text))
    for fine in ("0", "100", "0x40", "'064'"):
        validate_text(text.replace(f"global_batch_size: {written}", f"global_batch_size: {fine}"), "c.yaml")


@pytest.mark.parametrize("value", ["=", "<<"])
def test_a_bare_yaml11_special_key_as_a_value_says_quote_it(tmp_path, value):
    """`description: =` was refused as "YAML tag !!value is not allowed" (no tag was written)."""
    from service.configs.yamlio import YamlError
    from service.validate.document import validate_text
    from trainer.contract.overrides import ConfigError, coerce_value

    text = BUNDLED_SFT.replace("metadata:\n", f"metadata:\n  description: {value}\n", 1)
    with pytest.raises(YamlError, match="YAML 1.1 reads as a special key") as refused:
        validate_text(text, "c.yaml")
    assert refused.value.fix == f"quote it ('{value}') if it is text"
    assert "quote it" in str(_trainer_reads(tmp_path, text))
    with pytest.raises(ConfigError, match="quote it"):
        coerce_value(value)
    # a `<<` key still merges (this half asserted nothing)
    merged = BUNDLED_SFT.replace("dataloader:\n", "dataloader:\n  <<: {pin_memory: true}\n", 1)
    assert "<<:" in merged and _trainer_reads(tmp_path, merged).dataloader.pin_memory is True


@pytest.mark.parametrize("written, fix", [('!!int "0100"', "drop the !!int tag"), ("!!int 0100", "without a !!int tag"),
                                          ("0100", "quote it ('0100')")])
def test_an_octal_looking_text_is_told_how_to_stay_text(written, fix):
    """A tagged plain octal was told to quote it, which the tag refuses again."""
    from service.configs.yamlio import YamlError
    from service.validate.document import validate_text

    text = BUNDLED_SFT.replace("global_batch_size: 8", f"global_batch_size: {written}")
    with pytest.raises(YamlError) as refused:
        validate_text(text, "c.yaml")
    assert fix in refused.value.fix
