"""A YAML file the commands cannot use (an integer beyond 64 bits) is named at its file, line and column."""

from __future__ import annotations

import json

import pytest

from service.cli.app import main
from tests.service.configs.test_yaml_numbers import BIG


@pytest.fixture
def big_file(tmp_path):
    path = tmp_path / "bigint.yaml"
    path.write_text(f"distributed:\n  tp_size: {BIG}\n")
    (tmp_path / "small.yaml").write_text("distributed:\n  tp_size: 2\n")
    return path


def test_validate_reports_the_big_integer_as_unusable_yaml(big_file, capsys):
    code = main(["validate", str(big_file)])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)  # as any unusable YAML
    assert f"{big_file}:2:12: RA-F001 error: `distributed.tp_size` is an integer with 5,000 digits" in out
    assert "Traceback" not in out + err


def test_validate_json_carries_the_position(big_file, capsys):
    assert main(["validate", str(big_file), "--format", "json"]) == 2
    finding = json.loads(capsys.readouterr().out)["files"][0]["findings"][0]
    assert (finding["code"], finding["line"], finding["column"]) == ("RA-F001", 2, 12)


def test_diff_names_the_file_and_line(big_file, capsys):
    code = main(["diff", str(big_file.parent / "small.yaml"), str(big_file)])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"{big_file}:2:12: `distributed.tp_size` is an integer with 5,000 digits" in err
    assert "Traceback" not in out + err
