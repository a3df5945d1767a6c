"""Bug hunt s8b (#2, #4, #5, #8): tagged override values, linear YAML loading, override order over
HTTP, and the trainer's YAML loader under the service's limits."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import yaml

import service.yamlio as yamlio
import trainer.yaml_limits as yaml_limits
from service.api_advise import request_key
from service.api_models import RecommendBody
from service.cli import main
from service.rules import config_rules
from service.yamlio import OverrideError, load_yaml, parse_overrides
from trainer.overrides import ConfigError, load_yaml_file
from trainer.overrides import apply_overrides as trainer_apply_overrides

REPO = Path(__file__).resolve().parents[1]
TINY = ["--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"]
TINY_BODY = {"model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled"}


# ------------------------------------------------- #4 loading is linear in the number of keys


def _loader_lines(fn) -> int:
    """Python lines run in the YAML loader's own modules while ``fn`` runs: a count of work that
    does not depend on the machine's speed or load (PyYAML's C parser is not counted)."""
    files = {yamlio.__file__, yaml_limits.__file__}
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def on_call(frame, event, arg):
        return local if frame.f_code.co_filename in files else None

    previous = sys.gettrace()  # a coverage or debugger tracer, restored afterwards
    sys.settrace(on_call)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


@pytest.mark.parametrize("make", [
    lambda n: "dataset:\n" + "".join(f"  k{i}: {i}\n" for i in range(n)),
    lambda n: "".join(f"k{i}: {i}\n" for i in range(n)),
    # numbers and names that share their text: the case the reverse index must keep exact
    lambda n: "m:\n" + "".join(f"  {i}: a\n  '{i}': b\n" for i in range(n // 2)),
])
def test_loading_a_mapping_costs_linear_work_in_its_keys(make):
    small, large = (_loader_lines(lambda n=n: load_yaml(make(n))) for n in (400, 1600))
    # 4x the keys: about 4x the lines when each key costs O(1); the scan over the keys written so far
    # that finding #4 measured (140 s for 40,000 keys) made it about 16x.
    assert large / small < 5, (small, large)


def test_keys_that_share_a_name_keep_their_types_positions_and_duplicates():
    text = ("m:\n"
            "  1: int\n"
            "  '1': str\n"        # the number gives the name up and keeps its type
            "  2024-01-01: date\n"
            "  '2024-01-01': text\n"
            "  x: first\n"
            "  x: second\n"       # written twice: a duplicate at its own line
            "  0.5: float\n"
            "  !!str 0.5: str\n")
    doc = load_yaml(text, "k.yaml")
    assert list(doc.data["m"].items()) == [(1, "int"), ("1", "str"), ("2024-01-01", "text"), ("x", "second"),
                                           (0.5, "float"), ("0.5", "str")]
    assert doc.duplicates == [("m.x", 7, 3)]
    assert doc.positions["m.1"] == (3, 3) and doc.positions["m.x"] == (7, 3) and doc.positions["m.0.5"] == (9, 3)


def test_merged_keys_yield_to_explicit_ones_wherever_the_merge_stands():
    text = ("base: &b {a: 1, b: 2, c: 3}\n"
            "m:\n"
            "  a: own\n"
            "  <<: [*b, {d: 4, a: 9}]\n"
            "  <<: {e: 5}\n"
            "  b: own\n")
    doc = load_yaml(text)
    assert doc.data["m"] == {"a": "own", "c": 3, "d": 4, "e": 5, "b": "own"}
    assert doc.duplicates == []


def test_did_you_mean_compares_a_bounded_number_of_candidates(monkeypatch):
    calls: list[tuple[str, int]] = []
    real = config_rules.get_close_matches

    def spy(word, possibilities, n=3, cutoff=0.6):
        calls.append((word, len(possibilities)))
        return real(word, possibilities, n, cutoff)

    monkeypatch.setattr(config_rules, "get_close_matches", spy)
    config_rules._closest.cache_clear()
    many = {f"option_{i:04d}" for i in range(1000)}
    message = config_rules._did_you_mean("optoin_0001", many)
    assert message == "did you mean `option_0001`?"
    assert calls == [("optoin_0001", config_rules.MAX_SUGGESTION_CANDIDATES)]
    # the same typo again (another file, another request) is remembered
    assert config_rules._did_you_mean("optoin_0001", many) == message and len(calls) == 1
    # a key longer than any name is compared with none of them, and the list of names is capped
    long_key = "k" * 100_000
    listed = config_rules._did_you_mean(long_key, many)
    assert len(calls) == 1 and listed.endswith(f"and {1000 - config_rules.MAX_SUGGESTION_CANDIDATES} more")
    assert config_rules._did_you_mean("lrr", {"lr", "eps"}) == "did you mean `lr`?"


# ------------------------------------------------- #8 the trainer's loader has the service's limits


LAUGHS = ("model:\n  pretrained_model_name_or_path: tiny-llama\n"
          "recipe:\n  junk0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
          + "".join(f"  junk{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)))


@pytest.mark.parametrize("text, needle", [
    (LAUGHS, "alias expansion"),  # 80 aliases: under the alias cap, 10**9 values once expanded
    ("a: " + "[" * 70 + "]" * 70 + "\n", "nesting deeper than 64"),
    ("a: !!binary aGVsbG8=\n", "YAML tag !!binary is not allowed"),
    ("a: !!set {x}\n", "YAML tag !!set is not allowed"),
    ("a: 123456789012345678901234567890\n", "at most 64 bits"),
])
def test_trainer_loader_refuses_what_the_service_refuses(tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle) as trainer_err:
        load_yaml_file(path)
    assert str(trainer_err.value).startswith(str(path))
    with pytest.raises(yamlio.YamlError, match=needle):
        load_yaml(text, str(path))


def test_trainer_loader_keeps_plain_configs_and_its_float_fix(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optimizer: {lr: 3e-4}\nmetadata: {date: 2024-01-01}\nb: &x [1]\nc: *x\n")
    data = load_yaml_file(path)
    assert data["optimizer"]["lr"] == 3e-4 and data["c"] == [1]


def test_trainer_and_service_share_one_set_of_limits():
    for name in ("MAX_BYTES", "MAX_DEPTH", "MAX_ALIASES", "MAX_EVENTS", "MAX_NODES", "YamlError", "decode"):
        assert getattr(yamlio, name) is getattr(yaml_limits, name), name
    for module in ("trainer/yaml_limits.py", "trainer/overrides.py"):
        tree = ast.parse((REPO / module).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m and m.split(".")[0] in ("service", "torch") for m in imported), (module, imported)


# ------------------------------------------------- #2 tagged override values are refused when parsed


TAGGED = ["!!binary aGVsbG8=", "!!set {a}", "!!omap [{a: 1}]", "!custom x", "[1, !!binary aGVsbG8=]",
          "{a: !!set {b}}"]


@pytest.mark.parametrize("value", TAGGED)
def test_tagged_override_values_are_refused_naming_the_flag(value):
    with pytest.raises(OverrideError, match=r"^override --optimizer\.lr: YAML tag !\S+ is not allowed"):
        parse_overrides(["--optimizer.lr", value])
    with pytest.raises(ConfigError, match=r"^override --optimizer\.lr: YAML tag !\S+ is not allowed"):
        trainer_apply_overrides({}, [f"--optimizer.lr={value}"])  # `python -m trainer`'s own parser


def test_plain_values_that_look_tagged_still_read():
    assert parse_overrides(["--metadata.name", "'!important'", "--metadata.date", "2024-01-01"]) == [
        ("metadata.name", "!important"), ("metadata.date", "2024-01-01")]  # a date stays text, as in validate


@pytest.mark.parametrize("argv", [TINY + ["--optimizer.lr=!!binary aGVsbG8="],
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
    assert main(["recommend", *TINY, "-o", str(config)]) == 0
    capsys.readouterr()
    assert main(["train", str(config), "--optimizer.lr", "!!binary aGVsbG8=", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "override --optimizer.lr: YAML tag !!binary is not allowed" in err and "Traceback" not in err


# ------------------------------------------------- #5 HTTP applies overrides in the order given, as the CLI


SECTION_AND_KEY = [("lr_scheduler.min_lr", 0.0001), ("lr_scheduler", "{schedule: constant}")]


def test_request_key_keeps_the_order_of_the_overrides():
    forward = RecommendBody.model_validate({**TINY_BODY, "overrides": dict(SECTION_AND_KEY)})
    backward = RecommendBody.model_validate({**TINY_BODY, "overrides": dict(reversed(SECTION_AND_KEY))})
    keys = [k for k, _ in dict(request_key(forward))["overrides"]]
    assert keys == ["lr_scheduler.min_lr", "lr_scheduler"]
    assert request_key(forward) != request_key(backward)  # two configs, two cache entries


@pytest.mark.parametrize("pairs", [SECTION_AND_KEY, list(reversed(SECTION_AND_KEY))])
def test_a_section_and_a_key_inside_it_apply_in_order_on_the_cli_and_are_refused_over_http(client, tmp_path,
                                                                                          capsys, pairs):
    out = tmp_path / "c.yaml"
    flags = [f"--{key}={value}" for key, value in pairs]
    assert main(["recommend", *TINY, *flags, "-o", str(out)]) == 0
    cli_config = yaml.safe_load(out.read_text())
    # whichever comes last wins: the section replaces the key, or the key is set inside the section
    assert ("min_lr" in cli_config["lr_scheduler"]) == (pairs[-1][0] == "lr_scheduler.min_lr")
    # Review s8 #13: a JSON object's key order is not kept by every client, so HTTP refuses the pair
    r = client.post("/v1/recommend", json={**TINY_BODY, "overrides": dict(pairs)})
    assert r.status_code == 400, r.text
    detail = r.text
    assert "'lr_scheduler' and 'lr_scheduler.min_lr'" in detail and "overrides" in detail
    merged = {"lr_scheduler": "{schedule: constant, min_lr: 0.0001}"}
    r = client.post("/v1/recommend", json={**TINY_BODY, "overrides": merged})
    assert r.status_code == 200, r.text
    assert r.json()["config"]["lr_scheduler"]["min_lr"] == 0.0001
