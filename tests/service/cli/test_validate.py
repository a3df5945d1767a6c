"""`recipe-advisor validate` end to end: formats, exit codes and bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.paths import REPO

GOOD = """\
model:
  pretrained_model_name_or_path: llama3-8b
step_scheduler:
  global_batch_size: 64
  local_batch_size: 1
distributed:
  strategy: megatron
  tp_size: 2
  sequence_parallel: true
dataset:
  seq_length: 4096
hardware:
  gpu_type: h100
  gpus_per_node: 8
"""
BAD_BATCH = GOOD.replace("global_batch_size: 64", "global_batch_size: 30")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(BAD_BATCH)
    return tmp_path


def test_clean_file_exits_0(files, capsys):
    code, out, _ = run_cli(capsys, "validate", str(files / "good.yaml"))
    assert code == 0
    assert "0 error(s)" in out


def test_errors_exit_1_with_file_line_col_and_fix(files, capsys):
    code, out, _ = run_cli(capsys, "validate", str(files / "bad.yaml"))
    assert code == 1
    line = next(text for text in out.splitlines() if "RA-B001" in text)
    assert line.startswith(f"{files / 'bad.yaml'}:4:3: RA-B001 error:")
    assert "(fix: " in line


def test_json_format_matches_the_contract(files, capsys):
    code, out, _ = run_cli(capsys, "validate", str(files), "--format", "json")
    payload = json.loads(out)
    assert code == 1
    assert set(payload) == {"files", "summary"}
    assert payload["summary"] == {"files": 2, "errors": 1, "warnings": 0}
    finding = next(f for file in payload["files"] for f in file["findings"])
    assert set(finding) == {"code", "severity", "message", "key", "line", "column", "fix"}


def test_github_and_sarif_formats(files, capsys):
    code, out, _ = run_cli(capsys, "validate", str(files / "bad.yaml"), "--format", "github")
    assert code == 1
    assert out.startswith("::error file=") and ",line=4," in out
    code, out, _ = run_cli(capsys, "validate", str(files / "bad.yaml"), "--format", "sarif")
    sarif = json.loads(out)
    result = sarif["runs"][0]["results"][0]
    assert result["ruleId"] == "RA-B001"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 4


def test_cli_hardware_flags_override_the_config(files, capsys):
    # 6 GPUs: 64 is not divisible by micro 1 x DP 3 -> the batch rule fires
    code, out, _ = run_cli(capsys, "validate", str(files / "good.yaml"), "--gpus", "6")
    assert code == 1 and "RA-B001" in out
    code, _, err = run_cli(capsys, "validate", str(files / "good.yaml"), "--gpu-type", "h900")
    assert code == 2 and "h900" in err and "h100" in err


@pytest.mark.parametrize(
    "name, content, expect",
    [
        ("empty.yaml", b"", "empty"),
        ("list.yaml", b"- a\n- b\n", "not a mapping"),
        ("syntax.yaml", b"model:\n  a: [1, 2\n", "syntax error"),
        ("binary.yaml", b"\x00\x01\x02\x03binary", "binary"),
        ("bomb.yaml", ("a: &a [" + ",".join(["x"] * 50) + "]\n" + "".join(
            f"{c}: &{c} [" + ",".join([f"*{p}"] * 50) + "]\n" for p, c in zip("abcd", "bcde"))).encode(), "alias"),
    ],
)
def test_unusable_input_exits_2_without_traceback(tmp_path, capsys, name, content, expect):
    path = tmp_path / name
    path.write_bytes(content)
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 2
    assert expect in out
    assert "Traceback" not in out + err
    assert f"{path}:" in out


def test_twenty_megabyte_file_is_refused_without_reading_it_all(tmp_path, capsys):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.write(b"a: 1\n")
        fh.truncate(20 * 1024 * 1024)
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 2 and "limit" in out


def test_os_system_target_is_flagged_not_imported(tmp_path, capsys):
    path = tmp_path / "evil.yaml"
    marker = tmp_path / "pwned"
    path.write_text(GOOD + f"loss_fn:\n  _target_: os.system\n  command: touch {marker}\n")
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 1 and "RA-S001" in out
    assert not marker.exists()


def test_folder_of_mixed_files(tmp_path, capsys):
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.yml").write_text(BAD_BATCH)
    (tmp_path / "sub" / "broken.yaml").write_text("a: [\n")
    (tmp_path / "notes.txt").write_text("not yaml")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\x00\x00")
    code, out, _ = run_cli(capsys, "validate", str(tmp_path), "--format", "json")
    payload = json.loads(out)
    paths = sorted(Path(f["path"]).name for f in payload["files"])
    assert paths == ["bad.yml", "broken.yaml", "good.yaml"]
    assert code == 2  # one unusable file wins over errors


def test_unknown_model_offline_is_a_finding_with_suggestions(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    path = tmp_path / "m.yaml"
    path.write_text(GOOD.replace("llama3-8b", "llama3-8bb"))
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 0
    assert "RA-C009" in out and "llama3-8b" in out


def test_missing_path_and_no_args(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "validate", str(tmp_path / "nope.yaml"))
    assert code == 2 and "no such file" in out
    code, _, err = run_cli(capsys, "validate")
    assert code == 2


def test_bundled_index_validates_with_zero_errors(capsys):
    code, out, _ = run_cli(capsys, "validate", str(REPO / "recipe_index" / "recipes"), "--format", "json")
    payload = json.loads(out)
    errors = [(f["path"], x["code"], x["message"]) for f in payload["files"] for x in f["findings"]
              if x["severity"] == "error"]
    assert errors == []
    assert payload["summary"]["files"] > 100
    assert code == 0


def test_help_does_not_import_torch_or_fastapi():
    code = ("import sys; from service.cli.app import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "main(['validate', '--list-rules'])\n"
            "assert 'torch' not in sys.modules and 'fastapi' not in sys.modules, 'heavy import'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.mark.parametrize("argv", [["recipes"], ["validate", "--list-rules"],
                                  ["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"]])
def test_output_into_a_closed_pipe_ends_quietly(argv):
    """`recipe-advisor recipes | head -1`: the reader is gone before the first write (the read end is
    closed up front, so every run hits the broken pipe, whatever the output size)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "service.cli.app", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=60,
                              env=dict(os.environ, HF_HUB_OFFLINE="1"))
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`


def test_named_pipe_and_device_are_refused_without_opening(tmp_path):
    """Opening a FIFO blocks until a writer comes: validate must stat first. A subprocess with a
    timeout, so a regression fails here instead of hanging the suite."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    (tmp_path / "good.yaml").write_text(GOOD)
    done = subprocess.run([sys.executable, "-m", "service.cli.app", "validate", str(fifo), os.devnull,
                           str(tmp_path / "good.yaml"), "--format", "json"],
                          capture_output=True, text=True, cwd=REPO, timeout=60,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    by_path = {f["path"]: f["findings"] for f in json.loads(done.stdout)["files"]}
    [pipe_finding] = by_path[str(fifo)]
    assert pipe_finding["code"] == "RA-F001" and "not a regular file" in pipe_finding["message"]
    assert "named pipe" in pipe_finding["message"]
    [null_finding] = by_path[os.devnull]
    assert null_finding["code"] == "RA-F001" and "character device" in null_finding["message"]
    assert by_path[str(tmp_path / "good.yaml")] == []  # the regular file beside them is still checked


def test_folder_holding_a_fifo_still_checks_its_regular_files(tmp_path, capsys):
    os.mkfifo(tmp_path / "queue.yaml")
    (tmp_path / "good.yaml").write_text(GOOD)
    code, out, _ = run_cli(capsys, "validate", str(tmp_path))
    assert code == 2
    assert "queue.yaml:1:1: RA-F001 error: not a regular file" in out
    assert "2 file(s): 1 error(s), 0 warning(s)" in out


@pytest.mark.parametrize("argv, node_line, told, fix", [
    # the file says 2 nodes of 12 GPUs; an h100 node has 8: the same 24 GPUs are 3 nodes
    ([], "gpus_per_node: 12", "hardware.gpus_per_node=12", "hardware.gpus_per_node: 8 and hardware.num_nodes: 3"),
    # --gpus 12 on h100 is read as 12 per node (12 does not fill whole nodes of 8), on the file's 2 nodes
    (["--gpus", "12"], "gpus_per_node: 8", "--gpus 12 (read as 12 GPUs per node)",
     "--gpus 24 (the total: 3 nodes of 8) or --gpus 8 --nodes 3"),
    (["--gpus", "16", "--nodes", "2"], "gpus_per_node: 8", "--gpus 16", "--gpus 32 (the total: 4 nodes of 8)"),
])
def test_more_gpus_per_node_than_the_hardware_has_is_a_warning(tmp_path, capsys, argv, node_line, told, fix):
    config = GOOD.replace("gpus_per_node: 8", node_line) + "  num_nodes: 2\n"
    (tmp_path / "node.yaml").write_text(config)
    code, out, _ = run_cli(capsys, "validate", str(tmp_path / "node.yaml"), "--format", "json", *argv)
    findings = json.loads(out)["files"][0]["findings"]
    [finding] = [f for f in findings if f["code"] == "RA-C012"]
    assert finding["severity"] == "warning" and finding["key"] == "hardware.gpus_per_node"
    assert (finding["line"], finding["column"]) == (14, 3)
    assert told in finding["message"] and "one h100 node has 8 GPUs" in finding["message"]
    assert fix in finding["fix"]
    assert code == (1 if any(f["severity"] == "error" for f in findings) else 0)


@pytest.mark.parametrize("argv", [[], ["--gpus", "8"], ["--gpus", "64"], ["--gpus", "4", "--gpu-type", "gb200"]])
def test_gpus_within_the_node_raise_no_node_warning(files, capsys, argv):
    _, out, _ = run_cli(capsys, "validate", str(files / "good.yaml"), *argv)
    assert "RA-C012" not in out


def test_schema_errors_in_lists_point_at_the_element_once_each():
    """Dropping list element 0 used to shift element 1 into its place: three findings for two, at 1:1."""
    from service.validate.document import validate_text

    text = "peft:\n  method: lora\n  target_modules:\n    - 1\n    - [a]\n"
    found = [(f.key, f.line, f.column) for f in validate_text(text, "p.yaml").findings if f.code == "RA-C002"]
    assert found == [("peft.target_modules[0]", 4, 7), ("peft.target_modules[1]", 5, 7)]


def test_metadata_without_a_name_is_a_config_of_ones_own():
    """metadata.name is the index's; a config of one's own may write metadata for bridge_version alone."""
    from service.validate.document import validate_text

    text = "metadata:\n  bridge_version: 0.5.1\n"
    assert [f for f in validate_text(text, "m.yaml").findings if f.code == "RA-C002"] == []
