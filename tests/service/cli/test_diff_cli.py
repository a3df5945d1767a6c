"""`recipe-advisor diff` reading its inputs: either side from stdin, duplicate keys and unusable YAML named at
their line, NaN and infinities in JSON answers."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from fastapi.testclient import TestClient

from service.cli.app import main
from service.http.app import create_app


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))


def test_diff_reads_either_side_from_stdin(tmp_path, monkeypatch, capsys):
    new = tmp_path / "new.yaml"
    new.write_text("distributed: {tp_size: 2}\n")
    _stdin(monkeypatch, "distributed: {tp_size: 1}\n")
    assert main(["diff", "-", str(new), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == [
        {"key": "distributed.tp_size", "old": 1, "new": 2, "layer": "execution"}]
    _stdin(monkeypatch, "distributed: {tp_size: 4}\n")
    assert main(["diff", str(new), "-", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"][0]["new"] == 4


def test_diff_refuses_stdin_for_both_sides_and_names_stdin_in_errors(monkeypatch, capsys, tmp_path):
    assert main(["diff", "-", "-"]) == 2
    assert "both -" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text("precision: bf16\n")
    _stdin(monkeypatch, "a: [1, 2\n")
    assert main(["diff", "-", str(good)]) == 2
    assert "<stdin>:" in capsys.readouterr().err


def test_a_duplicate_key_is_refused_at_its_line(tmp_path, capsys):
    dup, other = tmp_path / "dup.yaml", tmp_path / "other.yaml"
    dup.write_text("a: 1\nb: 0\na: 2\n")
    other.write_text("a: 2\nb: 0\n")
    assert main(["diff", str(dup), str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{dup}:3:1" in err and "RA-C003" in err and "`a` is set twice" in err and "delete one" in err
    assert main(["diff", str(other), str(dup)]) == 2  # either side


def test_api_diff_refuses_duplicates_and_takes_nan(client):
    dup = client.post("/v1/diff", json={"base": "a: 1\na: 2\n", "new": "a: 2\n"})
    assert dup.status_code == 400 and dup.json()["field"] == "base" and dup.json()["line"] == 2
    assert "set twice" in dup.json()["detail"]
    same = client.post("/v1/diff", json={"base": "a: .nan\n", "new": "a: .nan\n"})
    assert same.status_code == 200 and same.json()["changes"] == []


def test_diff_json_writes_infinite_and_nan_values_as_strings(tmp_path):
    base, new = tmp_path / "a.yaml", tmp_path / "b.yaml"
    base.write_text("optimizer: {lr: 1.0, eps: 1.0}\n")
    new.write_text("optimizer: {lr: .inf, eps: .nan}\n")
    out = subprocess.run([sys.executable, "-m", "service.cli.app", "diff", str(base), str(new), "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    changes = {c["key"]: c["new"] for c in json.loads(out)["changes"]}  # strict JSON: no Infinity / NaN tokens
    assert changes == {"optimizer.lr": "inf", "optimizer.eps": "nan"}
    body = TestClient(create_app()).post("/v1/diff", json={"base": base.read_text(), "new": new.read_text()}).json()
    assert {c["key"]: c["new"] for c in body["changes"]} == changes
