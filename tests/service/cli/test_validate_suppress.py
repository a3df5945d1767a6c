"""Accepting findings in CI: --ignore, an inline ignore comment with a reason, a baseline; SARIF marks them
suppressed, text and the exit code leave them out."""

from __future__ import annotations

import json

from tests.cli import run_cli

CONFIG = """model:
  pretrained_model_name_or_path: llama3-8b
distributed:
  strategy: megatron
  tp_size: 1
  pp_size: 5{comment}
hardware:
  gpu_type: h100
  gpus_per_node: 5
dataset:
  seq_length: 4096
"""


def _write(tmp_path, comment=""):
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.format(comment=comment))
    return str(path)


def test_the_uneven_split_fails_and_ignore_accepts_it(tmp_path, capsys):
    path = _write(tmp_path)
    code, out, _ = run_cli(capsys, "validate", path)
    assert code == 1 and "RA-L011 error" in out
    code, out, _ = run_cli(capsys, "validate", path, "--ignore", "RA-L011,RA-L013")
    assert code == 0 and "RA-L011" not in out


def test_an_inline_comment_with_a_reason_accepts_the_finding_on_its_line(tmp_path, capsys):
    path = _write(tmp_path, "  # recipe-advisor: ignore[RA-L011] the launcher sets the split")
    code, out, _ = run_cli(capsys, "validate", path, "--format", "sarif")
    assert code == 0
    (result,) = [r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "RA-L011"]
    assert result["suppressions"] == [{"kind": "inSource", "justification": "the launcher sets the split"}]


def test_an_inline_comment_without_a_reason_is_not_applied(tmp_path, capsys):
    path = _write(tmp_path, "  # recipe-advisor: ignore[RA-L011]")
    code, out, _ = run_cli(capsys, "validate", path)
    assert code == 1 and "RA-L011 error" in out and "RA-F002 warning" in out


def test_a_baseline_accepts_todays_findings_and_fails_on_new_ones(tmp_path, capsys):
    path, baseline = _write(tmp_path), str(tmp_path / "baseline.json")
    code, _, err = run_cli(capsys, "validate", path, "--write-baseline", baseline)
    assert code == 0 and "wrote" in err
    code, out, _ = run_cli(capsys, "validate", path, "--baseline", baseline, "--format", "json")
    found = json.loads(out)
    assert code == 0 and found["summary"]["errors"] == 0
    assert {f["suppressed"]["kind"] for f in found["files"][0]["findings"] if f["code"] == "RA-L011"} == {"external"}
    (tmp_path / "c.yaml").write_text(CONFIG.format(comment="").replace("tp_size: 1", "tp_size: 3"))
    code, out, _ = run_cli(capsys, "validate", path, "--baseline", baseline)
    assert code == 1 and "RA-L001" in out


def test_a_file_that_is_no_baseline_is_refused(tmp_path, capsys):
    bad = tmp_path / "b.json"
    bad.write_text("[1, 2]")
    code, _, err = run_cli(capsys, "validate", _write(tmp_path), "--baseline", str(bad))
    assert code == 2 and "not a baseline file" in err
