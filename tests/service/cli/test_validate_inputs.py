"""`recipe-advisor validate` on what it is given: folders (empty, hidden, named twice), stdin, undecodable
files, SARIF locations and the rule list."""

from __future__ import annotations

import json
import subprocess

import pytest

from service.cli.app import main
from tests.paths import REPO

BUNDLED_SFT = (REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_sft.yaml").read_text()


def test_an_empty_folder_beside_a_file_is_an_error_in_every_format(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    good = tmp_path / "a.yaml"
    good.write_text((REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml").read_text())
    assert main(["validate", str(good), str(tmp_path / "empty"), "--format", "json"]) == 2
    files = {f["path"]: f["findings"] for f in json.loads(capsys.readouterr().out)["files"]}
    assert [f["code"] for f in files[str(tmp_path / "empty")]] == ["RA-F001"]
    assert main(["validate", str(tmp_path / "empty"), "--format", "sarif"]) == 2
    assert json.loads(capsys.readouterr().out)["runs"][0]["results"][0]["ruleId"] == "RA-F001"


def test_a_file_named_twice_is_validated_once(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.yaml").write_text(BUNDLED_SFT)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "a.yaml", "./a.yaml", str(tmp_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["files"] == 1


def test_validate_names_each_folder_once_and_the_hidden_folders_it_skipped(tmp_path, capsys):
    (tmp_path / "quiet").mkdir()
    (tmp_path / "hid" / ".git").mkdir(parents=True)
    (tmp_path / "hid" / ".git" / "x.yaml").write_text("a: 1\n")
    paths = [str(tmp_path / "quiet")] * 2 + [str(tmp_path / "hid"), "no-such-path", "no-such-path"]
    assert main(["validate", *paths, "--format", "json"]) == 2
    files = {f["path"]: f["findings"][0]["message"] for f in json.loads(capsys.readouterr().out)["files"]}
    assert len(files) == 3
    assert files[str(tmp_path / "quiet")] == "no .yaml/.yml file in this folder or below it"
    assert files[str(tmp_path / "hid")].endswith("(hidden folders are skipped: .git)")
    assert main(["validate", ""]) == 2 and "an empty path" in capsys.readouterr().err


def test_sarif_uris_are_encoded_and_every_reported_code_is_a_listed_rule(tmp_path, capsys):
    import json

    from service.cli.app import main

    folder = tmp_path / "we ird"
    folder.mkdir()
    (folder / "a,b%25.yaml").write_text("a: 1\n---\nb: 2\n")
    assert main(["validate", str(folder / "a,b%25.yaml"), "--format", "sarif"]) == 2
    run = json.loads(capsys.readouterr().out)["runs"][0]
    (result,) = run["results"]
    assert result["ruleId"] == "RA-F001" and "RA-F001" in {r["id"] for r in run["tool"]["driver"]["rules"]}
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("/we%20ird/a%2Cb%2525.yaml")


def test_the_rule_list_has_a_json_form_with_the_file_rule(capsys):
    import json

    from service.cli.app import main

    assert main(["validate", "--list-rules", "--format", "json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    codes = [r["code"] for r in rules]
    assert "RA-F001" in codes and "RA-E005" in codes and codes == sorted(codes)


@pytest.mark.parametrize("raw, said", [
    (b"a: 1\n---\n", "a config is one YAML document: remove the `---`"),
    (b"model:\n\tpretrained_model_name_or_path: x\n", "indent with spaces"),
    ("a: 1\n".encode("utf-16"), "file is UTF-16 text, not UTF-8"),
])
def test_file_errors_name_their_cause(tmp_path, capsys, raw, said):
    from service.cli.app import main

    path = tmp_path / "c.yaml"
    path.write_bytes(raw)
    assert main(["validate", str(path)]) == 2
    assert said in capsys.readouterr().out


def test_validate_reads_a_config_piped_in():
    # `validate -` said "no such file".
    import sys

    repo = REPO
    bad = "model:\n  pretrained_model_name_or_path: tiny-llama\ndistributed:\n  tp_size: 3\n"
    run = subprocess.run([sys.executable, "-m", "service.cli.app", "validate", "-"], input=bad, text=True,
                         capture_output=True, cwd=repo)
    assert run.returncode == 1 and "<stdin>:4:3: RA-L001 error" in run.stdout
    good = (repo / "recipe_index/recipes/bundled/tiny_llama_peft.yaml").read_text()
    run = subprocess.run([sys.executable, "-m", "service.cli.app", "validate", "-", "--format", "json"], input=good,
                         text=True, capture_output=True, cwd=repo)
    assert run.returncode == 0 and '"path": "<stdin>"' in run.stdout
