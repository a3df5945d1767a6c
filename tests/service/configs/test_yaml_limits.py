"""The YAML loaders' limits: linear work in the keys, a bounded did-you-mean, and one set of limits the
service and the trainer share."""

from __future__ import annotations

import ast
import sys

import pytest

import service.configs.yamlio as yamlio
import trainer.contract.yaml_limits as yaml_limits
from service.configs.yamlio import load_yaml
from service.validate.rules import config_rules
from tests.paths import REPO
from trainer.contract.overrides import ConfigError, load_yaml_file


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


LAUGHS = ("model:\n  pretrained_model_name_or_path: tiny-llama\n"
          "recipe:\n  junk0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
          + "".join(f"  junk{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)))


@pytest.mark.parametrize("make", [
    lambda n: "dataset:\n" + "".join(f"  k{i}: {i}\n" for i in range(n)),
    lambda n: "".join(f"k{i}: {i}\n" for i in range(n)),
    # numbers and names that share their text: the case the reverse index must keep exact
    lambda n: "m:\n" + "".join(f"  {i}: a\n  '{i}': b\n" for i in range(n // 2)),
])
def test_loading_a_mapping_costs_linear_work_in_its_keys(make):
    small, large = (_loader_lines(lambda n=n: load_yaml(make(n))) for n in (400, 1600))
    # 4x the keys: about 4x the lines when each key costs O(1); the scan
    # over the keys written so far (140 s for 40,000 keys) made it about 16x.
    assert large / small < 5, (small, large)


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


@pytest.mark.parametrize("text, needle", [
    (LAUGHS, "alias expansion"),  # 80 aliases: under the alias cap, 10**9 values once expanded
    ("a: " + "[" * 70 + "]" * 70 + "\n", "nesting deeper than 64"),
    ("a: " + "[" * 1000 + "]" * 1000 + "\n", r"nesting 1,000 or more levels deep \(the limit is 64\)"),
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
    for module in ("trainer/contract/yaml_limits.py", "trainer/contract/overrides.py"):
        tree = ast.parse((REPO / module).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m and m.split(".")[0] in ("service", "torch") for m in imported), (module, imported)
