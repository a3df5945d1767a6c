"""Command-line and request overrides: tagged values and integers beyond 64 bits refused naming the flag,
plain values read as written, a section and a key inside it applied in order."""

from __future__ import annotations

import pytest
import yaml

from service.cli.app import main
from service.configs.yamlio import OverrideError, parse_overrides
from service.http.routes.advise import body_request, request_key
from service.http.schemas import RecommendBody
from tests.cli import TINY_ON_CPU
from tests.service.configs.test_yaml_numbers import BIG
from trainer.contract.overrides import ConfigError
from trainer.contract.overrides import apply_overrides as trainer_apply_overrides

TINY_BODY = {"model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled"}


TAGGED = ["!!binary aGVsbG8=", "!!set {a}", "!!omap [{a: 1}]", "!custom x", "[1, !!binary aGVsbG8=]",
          "{a: !!set {b}}"]


SECTION_AND_KEY = [("lr_scheduler.min_lr", 0.0001), ("lr_scheduler", "{schedule: constant}")]


@pytest.mark.parametrize("value", [BIG, "[1, 2, " + "9" * 4000 + "]", "{a: 0x" + "f" * 17 + "}"])
def test_an_override_beyond_64_bits_is_refused_naming_the_flag(value):
    with pytest.raises(OverrideError, match=r"^override --distributed\.tp_size: the value is an integer with"):
        parse_overrides(["--distributed.tp_size", value])
    assert parse_overrides(["--train.seed", str((1 << 64) - 1)]) == [("train.seed", (1 << 64) - 1)]


@pytest.mark.parametrize("value", TAGGED)
def test_tagged_override_values_are_refused_naming_the_flag(value):
    with pytest.raises(OverrideError, match=r"^override --optimizer\.lr: YAML tag !\S+ is not allowed"):
        parse_overrides(["--optimizer.lr", value])
    with pytest.raises(ConfigError, match=r"^override --optimizer\.lr: YAML tag !\S+ is not allowed"):
        trainer_apply_overrides({}, [f"--optimizer.lr={value}"])  # `python -m trainer`'s own parser


def test_plain_values_that_look_tagged_still_read():
    assert parse_overrides(["--metadata.name", "'!important'", "--metadata.date", "2024-01-01"]) == [
        ("metadata.name", "!important"), ("metadata.date", "2024-01-01")]  # a date stays text, as in validate


@pytest.mark.parametrize("argv", [TINY_ON_CPU + ["--optimizer.lr=!!binary aGVsbG8="],
                                  ["--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100",
                                   "--dataset.extra", "!!set {a}"]])
def test_recommend_refuses_a_tagged_override_with_exit_2(tmp_path, capsys, argv):
    out = tmp_path / "c.yaml"
    assert main(["recommend", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "override --" in err and "is not allowed" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("body", [{**TINY_BODY, "overrides": {"optimizer.lr": "!!binary aGVsbG8="}},
                                  {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                   "overrides": {"checkpoint.save": "!!set {a}"}}])
def test_http_refuses_a_tagged_override_with_400(client, body):
    r = client.post("/v1/recommend", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "overrides"
    key = next(iter(body["overrides"]))
    assert r.json()["detail"].startswith(f"override --{key}: YAML tag !!")


def test_train_refuses_a_tagged_override_with_exit_2(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    assert main(["recommend", *TINY_ON_CPU, "-o", str(config)]) == 0
    capsys.readouterr()
    assert main(["train", str(config), "--optimizer.lr", "!!binary aGVsbG8=", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "override --optimizer.lr: YAML tag !!binary is not allowed" in err and "Traceback" not in err


def test_request_key_keeps_the_order_of_the_overrides():
    forward = RecommendBody.model_validate({**TINY_BODY, "overrides": dict(SECTION_AND_KEY)})
    backward = RecommendBody.model_validate({**TINY_BODY, "overrides": dict(reversed(SECTION_AND_KEY))})
    names = body_request(RecommendBody.model_validate(TINY_BODY))  # the resolved names: these overrides nest
    keys = [k for k, _ in dict(request_key(forward, names))["overrides"]]
    assert keys == ["lr_scheduler.min_lr", "lr_scheduler"]
    assert request_key(forward, names) != request_key(backward, names)  # two configs, two cache entries


@pytest.mark.parametrize("pairs", [SECTION_AND_KEY, list(reversed(SECTION_AND_KEY))])
def test_a_section_and_a_key_inside_it_apply_in_order_on_the_cli_and_are_refused_over_http(client, tmp_path,
                                                                                          capsys, pairs):
    out = tmp_path / "c.yaml"
    flags = [f"--{key}={value}" for key, value in pairs]
    assert main(["recommend", *TINY_ON_CPU, *flags, "-o", str(out)]) == 0
    cli_config = yaml.safe_load(out.read_text())
    # whichever comes last wins: the section replaces the key, or the key is set inside the section
    assert ("min_lr" in cli_config["lr_scheduler"]) == (pairs[-1][0] == "lr_scheduler.min_lr")
    # A JSON object's key order is not kept by every client, so HTTP refuses the pair
    r = client.post("/v1/recommend", json={**TINY_BODY, "overrides": dict(pairs)})
    assert r.status_code == 400, r.text
    detail = r.text
    assert "'lr_scheduler' and 'lr_scheduler.min_lr'" in detail and "overrides" in detail
    merged = {"lr_scheduler": "{schedule: constant, min_lr: 0.0001}"}
    r = client.post("/v1/recommend", json={**TINY_BODY, "overrides": merged})
    assert r.status_code == 200, r.text
    assert r.json()["config"]["lr_scheduler"]["min_lr"] == 0.0001
