"""Safe YAML loading with positions, limits, and command-line overrides."""

import time
import tracemalloc

import pytest

from service.configs.yamlio import (
    MAX_BYTES,
    OverrideError,
    YamlError,
    apply_overrides,
    decode,
    load_yaml,
    parse_overrides,
)

BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
)


def test_positions_of_nested_keys_and_list_items():
    doc = load_yaml("model:\n  name: x\n  n: 3\nitems:\n  - a: 1\n", "f.yaml")
    assert doc.data == {"model": {"name": "x", "n": 3}, "items": [{"a": 1}]}
    assert doc.positions["model"] == (1, 1)
    assert doc.positions["model.n"] == (3, 3)
    assert doc.positions["items[0].a"] == (5, 5)
    assert doc.position("model.missing.deeper") == (1, 1)


def test_bare_exponent_floats_are_floats_but_quoted_stay_strings():
    doc = load_yaml("lr: 1e-4\ns: '1e-4'\nd: 2024-01-01\n")
    assert doc.data == {"lr": 1e-4, "s": "1e-4", "d": "2024-01-01"}


def test_duplicate_keys_are_recorded():
    doc = load_yaml("a: 1\nb: 2\na: 3\n")
    assert doc.data["a"] == 3
    assert doc.duplicates == [("a", 3, 1)]


def test_merge_keys():
    doc = load_yaml("base: &b {x: 1, y: 2}\nchild:\n  <<: *b\n  y: 5\n")
    assert doc.data["child"] == {"x": 1, "y": 5}


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("# only a comment\n", "no YAML document"),
        ("- a\n- b\n", "top level is a list"),
        ("42\n", "top level is a single value"),
        ("a: b: c\n", "syntax error"),
        ("x: !!python/object/apply:os.system [ls]\n", "not allowed"),
        ("x: !custom 1\n", "not allowed"),
    ],
)
def test_unusable_documents_raise_with_reason(text, reason):
    with pytest.raises(YamlError) as err:
        load_yaml(text, "bad.yaml")
    assert reason in str(err.value)
    assert "bad.yaml" in str(err.value)


def test_syntax_error_reports_the_line():
    with pytest.raises(YamlError) as err:
        load_yaml("model:\n  a: 1\n  b: [1, 2\nc: 3\n", "s.yaml")
    assert err.value.line is not None and err.value.line >= 3


@pytest.mark.parametrize(
    "text, line, column, reason, fix",
    [
        ("model:\n  x: 1\nnull: 4\n", 3, 1, "a null key: `null` reads as YAML null", '"null"'),
        ("a:\n  ~: 1\n", 2, 3, "a null key: `~` reads as YAML null", '"~"'),
        ("? \n: 3\n", 1, 2, "a null key: the key is empty", "give the key a name"),
        ("? [a, b]\n: 1\n", 1, 3, "a mapping key is a list", "plain name"),
        ("? {a: 1}\n: 1\n", 1, 3, "a mapping key is a mapping", "plain name"),
    ],
)
def test_null_and_collection_keys_say_what_the_key_is(text, line, column, reason, fix):
    with pytest.raises(YamlError) as err:
        load_yaml(text, "k.yaml")
    assert err.value.reason.startswith(reason)
    assert (err.value.line, err.value.column) == (line, column)
    assert fix in err.value.fix


def test_quoted_null_is_an_ordinary_key():
    assert load_yaml('"null": 2\n').data == {"null": 2}


def test_alias_bomb_rejected_fast_and_bounded():
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(YamlError, match="alias"):
        load_yaml(BOMB)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 20 * 1024 * 1024


def test_deep_nesting_rejected():
    with pytest.raises(YamlError, match="nesting|depth"):
        load_yaml("a: " + "[" * 10_000 + "]" * 10_000)
    with pytest.raises(YamlError, match="nesting"):
        load_yaml("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 80)) + "  " * 80 + "v: 1\n")


def test_size_binary_and_encoding_limits():
    with pytest.raises(YamlError, match="limit"):
        decode(b"a: 1\n" * (MAX_BYTES // 4), "big.yaml")
    with pytest.raises(YamlError, match="binary"):
        decode(b"\x7fELF\x00\x00\x01", "prog.yaml")
    with pytest.raises(YamlError, match="UTF-8"):
        decode(b"a: \xff\xfe\n", "latin.yaml")


def test_overrides_both_spellings_and_types():
    pairs = parse_overrides(["--optimizer.lr", "1e-4", "--distributed.tp_size=2", "--a.flag", "true",
                             "--a.list=[1, 2]", "--a.name", "llama"])
    assert pairs == [("optimizer.lr", 1e-4), ("distributed.tp_size", 2), ("a.flag", True),
                     ("a.list", [1, 2]), ("a.name", "llama")]


def test_apply_overrides_copies_and_creates_sections():
    data = {"optimizer": {"lr": 1.0}}
    out = apply_overrides(data, ["--optimizer.lr=0.5", "--new.key", "3"])
    assert out == {"optimizer": {"lr": 0.5}, "new": {"key": 3}}
    assert data == {"optimizer": {"lr": 1.0}}


@pytest.mark.parametrize("argv", [["--a.b"], ["plain"], ["--"], ["--a..b", "1"]])
def test_bad_overrides_explain(argv):
    with pytest.raises(OverrideError):
        parse_overrides(argv)


def test_override_into_a_scalar_is_refused():
    with pytest.raises(OverrideError, match="not a section"):
        apply_overrides({"a": 1}, ["--a.b", "2"])


def test_service_and_trainer_read_overrides_alike():
    """`recommend --a.b v` and `train --a.b v` must mean the same config."""
    from trainer.contract.overrides import parse_overrides as trainer_parse

    argv = ["--a.none", "none", "--a.null=null", "--a.empty=", "--a.lr", "3e-4", "--a.neg", "-2",
            "--a.text", "2024-01-01x", "--a.list=[1, {b: 2}]", "--a.flag", "off"]
    assert parse_overrides(argv) == trainer_parse(argv)
    assert dict(parse_overrides(argv))["a.none"] is None and dict(parse_overrides(argv))["a.empty"] == ""


def test_override_alias_bomb_is_refused_before_it_expands():
    levels = ["&l0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 8)]
    bomb = "[" + ", ".join(levels) + "]"  # 10**8 values once expanded, 400 characters written
    with pytest.raises(OverrideError, match="alias expansion"):
        parse_overrides(["--model.junk", bomb])
    with pytest.raises(OverrideError, match="over 10,000 characters"):
        parse_overrides(["--model.junk", "x" * 10_001])


def _run_guarded(snippet: str) -> str:
    """Run ``snippet`` in a fresh interpreter under a hard timeout, so a regression that loops on a
    recursive alias fails this test instead of hanging the suite (and its memory) for good."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("a recursive alias was still being expanded after 10 s")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    "text, line, column",
    [("a: &a [*a]\n", 1, 4), ("a: &a {b: *a}\n", 1, 4), ("x: 1\nmodel:\n  deep: &d\n    - [1, *d]\n", 3, 9)],
)
def test_recursive_alias_in_a_document_is_refused_with_its_position(text, line, column):
    out = _run_guarded(
        "from service.configs.yamlio import YamlError, load_yaml\n"
        "from unittest import mock\n"
        "import yaml.constructor as c\n"
        # the refusal must come before any PyYAML constructor touches the cyclic node graph
        "with mock.patch.object(c.BaseConstructor, 'construct_object', side_effect=AssertionError('built')):\n"
        "    try:\n"
        f"        load_yaml({text!r}, 'r.yaml')\n"
        "    except YamlError as err:\n"
        "        print(err.path, err.line, err.column, err.reason, '|', err.fix)\n"
    )
    path, got_line, got_column, rest = out.split(" ", 3)
    assert (path, int(got_line), int(got_column)) == ("r.yaml", line, column)
    assert "recursive alias" in rest and "write the value out" in rest


def test_recursive_alias_in_an_override_is_refused():
    out = _run_guarded(
        "from service.configs.yamlio import OverrideError, apply_overrides\n"
        "try:\n"
        "    apply_overrides({'optimizer': {'lr': 1.0}}, ['--optimizer.lr', '&a [*a, *a]'])\n"
        "except OverrideError as err:\n"
        "    print(err)\n"
    )
    assert "recursive alias" in out


def test_shared_aliases_are_not_mistaken_for_cycles():
    doc = load_yaml("a: &a [1, {k: 2}]\nb: [*a, *a]\nc: {d: *a, e: *a}\n")
    assert doc.data["b"] == [[1, {"k": 2}], [1, {"k": 2}]]
    assert doc.data["c"] == {"d": [1, {"k": 2}], "e": [1, {"k": 2}]}


def test_override_nesting_is_bounded_like_a_file():
    """900 brackets fit libyaml's own limit but overflow Python's stack when the config is dumped."""
    with pytest.raises(OverrideError, match="nesting deeper than"):
        parse_overrides(["--model.junk", "[" * 900 + "]" * 900])
    assert parse_overrides(["--a.b", "[[1]]", "--a.c", "[1, 2"]) == [("a.b", [[1]]), ("a.c", "[1, 2")]


def test_override_errors_name_the_flag():
    out = _run_guarded(
        "from service.configs.yamlio import OverrideError, apply_overrides\n"
        "try:\n"
        "    apply_overrides({'optimizer': {'lr': 1.0}}, ['--a.b', '1', '--optimizer.lr', '&a [*a]'])\n"
        "except OverrideError as err:\n"
        "    print(err)\n"
    )
    assert out.startswith("override --optimizer.lr: recursive alias"), out
    with pytest.raises(OverrideError, match=r"^override --model\.junk: value is over 10,000 characters"):
        parse_overrides(["--model.junk", "x" * 10_001])
    # a value YAML reads as an impossible date stays the string given (no traceback, no error)
    assert apply_overrides({}, ["--metadata.name=2024-13-45"]) == {"metadata": {"name": "2024-13-45"}}


def test_a_plain_copy_is_the_safe_yaml_round_trip_keys_sorted_alike():
    import json

    import yaml

    from service.configs.yamlio import plain_copy

    config = {"z": {"lr": 1e-4, "betas": (0.9, 0.95), "name": "yes", "ver": "1.0", "none": None, "on": True},
              "a": [{"k": "ü – ✓", "n": 10**20}, "2024-01-01", float("inf")], "m": {"b": 1, "a": 2}}
    copied = plain_copy(config)
    expected = yaml.safe_load(yaml.safe_dump(config))
    assert json.dumps(copied) == json.dumps(expected)  # same values, same key order (sorted)
    copied["z"]["betas"].append(1)
    assert config["z"]["betas"] == (0.9, 0.95)
