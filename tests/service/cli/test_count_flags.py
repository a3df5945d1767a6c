"""Count and size flags bounded as the API and the overrides bound them, named in the refusal; `--gpus` is
GPUs per node; keys the flags set cannot be overridden."""

from __future__ import annotations

import json

import pytest

from service.cli.app import main
from service.http.schemas.requests import MAX_GPUS, MAX_NODES
from service.plan import search_space
from service.request import LIMITS as INTEGER_LIMITS
from service.validate.rules import layout, pipeline
from tests.cli import TINY_ON_CPU, run_cli
from tests.paths import REPO

LLAMA = ["--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"]


# 8 GPUs as 2 nodes of 4: a count of GPUs per node that leaves the node count to the file
TWO_NODES = (REPO
             / "recipe_index/recipes/megatron/llama/llama3_70b_peft_8gpu_gb200_bf16.yaml")


@pytest.fixture
def no_huge_search(monkeypatch):
    """The planner's divisor search trial-divides up to sqrt(world): for 2**64 GPUs that never ends.
    A count past the flag bounds must be refused before it, so reaching it with one is a failure."""
    for module in (search_space, layout, pipeline):
        real = module.divisors

        def guarded(n, real=real):
            if n > MAX_GPUS * MAX_NODES:
                pytest.fail(f"the planner searched the divisors of {n}: the flag bound was not applied")
            return real(n)

        monkeypatch.setattr(module, "divisors", guarded)


def _findings(capsys, *argv: str) -> tuple[int, list[dict]]:
    code, out, _ = run_cli(capsys, "validate", str(TWO_NODES), "--format", "json", *argv)
    return code, json.loads(out)["files"][0]["findings"]


@pytest.mark.parametrize("command", ["plan", "recommend"])
@pytest.mark.parametrize("flag, value, limit", [
    ("--gpus", MAX_GPUS + 1, MAX_GPUS), ("--gpus", 2**64, MAX_GPUS),
    ("--nodes", MAX_NODES + 1, MAX_NODES), ("--nodes", 10**18, MAX_NODES),
])
def test_counts_past_the_api_bounds_are_refused_naming_the_flag(capsys, no_huge_search, command, flag, value, limit):
    argv = ["--model", "llama3-8b", "--gpu-type", "h100", "--gpus", "8", "--nodes", "1"]
    argv[argv.index(flag) + 1] = str(value)
    code, out, err = run_cli(capsys, command, *argv)
    assert code == 2 and out == ""
    assert f"error: {flag}: expected an integer from 1 to {limit:,}, got {value}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("flag, value, limit", [("--gpus", MAX_GPUS + 1, MAX_GPUS), ("--nodes", 2**64, MAX_NODES),
                                                ("--gpus", 0, MAX_GPUS)])
def test_validate_bounds_its_count_flags_alike(capsys, flag, value, limit):
    code, out, err = run_cli(capsys, "validate", str(TWO_NODES), flag, str(value))
    assert code == 2 and out == ""
    assert f"{flag}: expected an integer from 1 to {limit:,}, got {value}" in err


def test_the_bounds_themselves_are_accepted():
    from service.request import LIMITS as FLAG_LIMITS
    from service.request import check_limits as check_flag_limits

    assert FLAG_LIMITS == {"gpus": MAX_GPUS, "nodes": MAX_NODES, **INTEGER_LIMITS}
    check_flag_limits(**FLAG_LIMITS)  # raises nothing at the limits


@pytest.mark.parametrize("command", ["plan", "recommend"])
@pytest.mark.parametrize("flag, field, beyond", [
    ("--global-batch-size", "global_batch_size", INTEGER_LIMITS["global_batch_size"] + 1),
    ("--global-batch-size", "global_batch_size", 2**63),
    ("--global-batch-size", "global_batch_size", 2**64),
    ("--seq-length", "seq_length", INTEGER_LIMITS["seq_length"] + 1),
])
def test_size_flags_have_the_limits_of_their_overrides(capsys, command, flag, field, beyond):
    limit, least = INTEGER_LIMITS[field], 2 if field == "seq_length" else 1  # a token and its label
    code, out, err = run_cli(capsys, command, *LLAMA, flag, str(beyond))
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"error: {flag}: expected an integer from {least} to {limit:,}, got {beyond}" in err


@pytest.mark.parametrize("key, field", [("step_scheduler.global_batch_size", "global_batch_size"),
                                        ("dataset.seq_length", "seq_length")])
def test_the_override_spelling_is_refused_in_the_same_words(capsys, key, field):
    limit, least = INTEGER_LIMITS[field], 2 if field == "seq_length" else 1
    code, _, err = run_cli(capsys, "recommend", *LLAMA, f"--{key}", str(limit + 1))
    assert code == 2 and f"--{key}: expected an integer from {least} to {limit:,}, got {limit + 1}" in err


def test_a_config_that_does_not_read_back_is_refused_without_a_traceback(capsys, tmp_path, monkeypatch):
    """63 levels pass the override's own nesting limit; under `metadata` the written YAML is deeper than a
    config may be, so recommend's re-read raises YamlError: a message and exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    deep = "[" * 63 + "]" * 63
    code, out, err = run_cli(capsys, "recommend", *TINY_ON_CPU, "--metadata.deep", deep, "-o", "c.yaml")
    assert code == 2 and out == ""
    assert "error: the advised config would not read back as a config" in err
    assert "nesting deeper than 64 levels" in err and "Nothing written" in err
    assert not (tmp_path / "c.yaml").exists()


def test_validate_gpus_alone_keeps_the_files_node_count(capsys):
    """The file runs 2 nodes of 4 gb200: --gpus 4 restates the GPUs per node (README: `--gpus` is GPUs per
    node like hardware.gpus_per_node), so the 8 GPUs are judged, as without the flag."""
    as_written = _findings(capsys)
    code, per_node = _findings(capsys, "--gpus", "4")
    said = [f for f in per_node if f["code"] == "RA-C014"]  # the reading is said, nothing else
    assert said and "judged on 8 GPUs: --gpus 4 (API: gpus) was read as GPUs per node" in said[0]["message"]
    assert (code, [f for f in per_node if f["code"] != "RA-C014"]) == as_written
    assert not any(f["code"] == "RA-C006" for f in as_written[1])
    # --nodes still overrides the file, and a total that fills whole nodes is still read as the total
    _, one_node = _findings(capsys, "--gpus", "4", "--nodes", "1")
    assert any(f["code"] == "RA-C006" and "runs on 4" in f["message"] for f in one_node)
    _, as_total = _findings(capsys, "--gpus", "16")
    assert any(f["code"] == "RA-C006" and "runs on 16" in f["message"] for f in as_total)


def test_the_api_reads_gpus_per_node_alike(client):
    text = TWO_NODES.read_text()
    plain = client.post("/v1/validate", json={"yaml": text}).json()
    per_node = client.post("/v1/validate", json={"yaml": text, "gpus": 4}).json()
    found = per_node["files"][0]["findings"]
    assert [f for f in found if f["code"] != "RA-C014"] == plain["files"][0]["findings"]
    assert [f["message"] for f in found if f["code"] == "RA-C014"] == [
        "judged on 8 GPUs: --gpus 4 (API: gpus) was read as GPUs per node, on the file's 2 nodes"]


def test_the_sequence_length_bound_names_its_real_minimum(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--seq-length", "4194305"]) == 2
    assert "expected an integer from 2 to 4,194,304" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["hardware.gpus_per_node", "hardware.num_nodes"])
def test_gpu_count_keys_are_refused_naming_the_flags(key, capsys):
    assert main(["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", f"--{key}", "4"]) == 2
    assert "set by --gpus and --nodes" in capsys.readouterr().err


def test_a_mistyped_flag_is_named_not_located_in_an_unwritten_file(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    code = main(["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "-o", str(out),
                 "--override", "optimizer.lr=1e-4"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "--override: not an option and not a config section" in err and str(out) not in err


def test_bundled_sequence_beyond_the_models_positions_is_refused_naming_the_flag(capsys):
    # The bundled trainer refuses it (RA-C011 is an error for fsdp2/ddp): plan and recommend say so
    # up front, naming --seq-length, instead of writing nothing after validate fails.
    for command in ("plan", "recommend"):
        assert main([command, "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                     "--seq-length", "1000"]) == 2
        assert ("error: --seq-length: seq_length 1000 is beyond the 256 positions of tiny-llama"
                in capsys.readouterr().err)
    assert main(["plan", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "h100", "--engine", "megatron",
                 "--seq-length", "1000"]) == 0  # Megatron extends positions (RA-C011 warns there)
