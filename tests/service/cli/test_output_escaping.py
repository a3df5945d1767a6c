"""What the commands print stays bounded and inert: control characters of keys and paths escaped, huge
aliased values and keys shortened, in every output format."""

from __future__ import annotations

from tests.service.validate.test_trainer_refusals import BUNDLED


def test_diff_shows_a_huge_aliased_value_by_its_start_and_length(capsys, tmp_path):
    from fastapi.testclient import TestClient

    from service.cli.app import main
    from service.http.app import create_app

    big = "x" * 100_000
    new = "metadata:\n  name: &a " + big + "\n  description: *a\nmodel:\n" + "".join(f"  k{i}: *a\n" for i in range(50))
    response = TestClient(create_app()).post("/v1/diff", json={"base": "metadata:\n  name: y\n", "new": new})
    assert response.status_code == 200 and len(response.content) < 100_000  # it was 5 MB
    shown = {c["key"]: c["new"] for c in response.json()["changes"]}
    assert "metadata.name" not in shown  # index metadata is not training
    assert shown["model.k0"].endswith("(100,002 characters)")
    (tmp_path / "a.yaml").write_text("metadata:\n  name: y\n")
    (tmp_path / "b.yaml").write_text(new)
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 0
    assert len(capsys.readouterr().out) < 100_000


def test_text_output_escapes_control_characters_of_keys_and_paths(capsys, tmp_path):
    from service.cli.app import main

    config = tmp_path / "we\nird.yaml"
    config.write_text('model:\n  pretrained_model_name_or_path: tiny-llama\n'
                      '"x\\n::notice file=README.md,line=1::all checks passed": 1\n"e\\e[31m": 2\n')
    assert main(["validate", str(config)]) == 1
    out = capsys.readouterr().out
    assert not any(line.startswith("::") for line in out.splitlines())
    assert "\x1b" not in out and "x\\n::notice" in out and "e\\x1b[31m" in out and "we\\nird.yaml" in out


def test_long_keys_and_aliased_targets_stay_bounded_in_every_output(tmp_path, capsys):
    from fastapi.testclient import TestClient

    from service.cli.app import main
    from service.http.app import create_app

    big = "k" * 50_000
    new = "metadata:\n  name: x\n  description: &a " + big + "\n" + "".join(f"m{i}:\n  *a : 1\n" for i in range(40))
    client = TestClient(create_app())
    assert len(client.post("/v1/diff", json={"base": "metadata:\n  name: y\n", "new": new}).content) < 100_000
    (tmp_path / "a.yaml").write_text("metadata:\n  name: y\n")
    (tmp_path / "b.yaml").write_text(new + "".join(f"z{i}: {i}\n" for i in range(200)))
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 0
    assert len(capsys.readouterr().out) < 200_000  # no line is padded to the 50,000-character key
    aliased = ("optimizer:\n  _target_: torch.optim.AdamW\n  x: &a os." + "a" * 50_000 + "\n  groups:\n"
               + "    - {_target_: *a}\n" * 50)
    assert len(client.post("/v1/validate", json={"yaml": aliased}).content) < 100_000


def test_train_escapes_control_characters_of_keys_in_its_errors(tmp_path, capsys):
    from service.cli.app import main

    config = tmp_path / "c.yaml"
    config.write_text(BUNDLED.replace("model:\n", 'model:\n  "x\\n::error file=a::forged": 1\n', 1))
    assert main(["train", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "x\\n::error" in err and not any(line.startswith("::") for line in err.splitlines())
