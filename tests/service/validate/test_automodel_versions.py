"""AutoModel recipes judged by the schema of their AutoModel version (recipe_index/data/automodel_schema.json)."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path

import yaml

from service.validate.document import validate_text
from tests.cli import run_cli

RECIPES = Path(__file__).parent / "automodel_recipes"
LLAMA = yaml.safe_load((RECIPES / "llama3_2_1b_squad.yaml").read_text())
HEADER = "# automodel FILE --nproc-per-node 8\n"
COVERED = {"RA-A014", "RA-A015", "RA-A016"}


def check(edit=None, version=None, drop=()):
    data = copy.deepcopy(LLAMA)
    for key in drop:
        data.pop(key, None)
    if edit:
        edit(data)
    text = HEADER + yaml.safe_dump(data, sort_keys=False)
    return validate_text(text, "recipe.yaml", automodel_version=version).findings


def coded(findings, code):
    return [f for f in findings if f.code == code]


def _autopipeline(d):
    d["autopipeline"] = {"pp_schedule": "1f1b", "pp_microbatch_size": 1}


def test_a_renamed_section_is_an_error_at_versions_after_the_rename_with_the_new_name_as_fix():
    found = coded(check(_autopipeline, version="0.5.0"), "RA-A016")
    assert [(f.severity, f.key) for f in found] == [("error", "autopipeline")]
    assert "distributed.pipeline" in found[0].message and "distributed.pipeline" in found[0].fix
    assert not coded(check(_autopipeline, version="0.2.0", drop=("recipe",)), "RA-A016")  # still read there


def test_a_section_only_some_versions_read_is_a_warning_naming_the_version_key_when_unknown():
    old = {"dist_env": {"backend": "nccl"}, "step_scheduler": {"global_batch_size": 8, "local_batch_size": 1},
           "autopipeline": {"pp_microbatch_size": 1}}
    found = coded(validate_text(HEADER + yaml.safe_dump(old), "old.yaml", dialect="automodel").findings, "RA-A016")
    assert [(f.severity, f.key) for f in found] == [("warning", "autopipeline")]
    assert "metadata.automodel_version" in found[0].fix and "v0.3.0" in found[0].message


def test_a_near_miss_section_is_an_error_naming_the_section_read():
    def typo(d):
        d["step_schedular"] = d.pop("step_scheduler")

    found = coded(check(typo, version="0.5.0"), "RA-A016")
    assert [(f.severity, f.key) for f in found] == [("error", "step_schedular")]
    assert "step_scheduler" in found[0].fix


def test_recipe_is_required_from_the_cli_refactor_only():
    assert not coded(check(version="2026-03-20", drop=("recipe",)), "RA-A001")
    assert [f.severity for f in coded(check(version="0.5.0", drop=("recipe",)), "RA-A001")] == ["error"]


def test_a_target_named_by_no_callable_is_an_error_with_the_nearest_name():
    def moved(d):
        d["loss_fn"]["_target_"] = "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropie"

    found = coded(check(moved, version="0.5.0"), "RA-A014")
    assert [(f.severity, f.key) for f in found] == [("error", "loss_fn._target_")]
    assert "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy" in found[0].fix


def test_a_keyword_the_signature_does_not_take_is_an_error_naming_the_accepted_one():
    def typo(d):
        d["loss_fn"] = {"_target_": "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy",
                        "ignore_indx": -100}

    found = coded(check(typo, version="0.5.0"), "RA-A011")
    assert [(f.severity, f.key) for f in found] == [("error", "loss_fn.ignore_indx")]
    assert "ignore_index" in found[0].fix


def test_the_recipes_metadata_states_the_version_and_an_unusable_one_is_an_error():
    def stated(version):
        return lambda d: (d.setdefault("metadata", {}).update(automodel_version=version), _autopipeline(d))

    assert [f.severity for f in coded(check(stated("0.5.0")), "RA-A016")] == ["error"]
    assert not coded(check(stated("0.5.0")), "RA-A015")
    assert not coded(check(stated(dt.date(2026, 3, 20)), drop=("recipe",)), "RA-A001")  # YAML reads a date
    bad = coded(check(stated("someday")), "RA-A015")
    assert [(f.severity, f.key) for f in bad] == [("error", "metadata.automodel_version")]


def test_cli_takes_automodel_version_and_refuses_an_unknown_one(capsys, tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(HEADER + yaml.safe_dump(LLAMA, sort_keys=False))
    code, out, _ = run_cli(capsys, "validate", "--automodel-version", "0.5.0", str(path))
    assert code == 0, out
    code, _, err = run_cli(capsys, "validate", "--automodel-version", "9.9.9", str(path))
    assert code == 2 and "--automodel-version" in err


def test_http_validate_takes_automodel_version_in_the_body_and_the_query(client):
    old = HEADER + yaml.safe_dump({**LLAMA, "autopipeline": {"pp_microbatch_size": 1}}, sort_keys=False)
    r = client.post("/v1/validate", json={"yaml": old, "automodel_version": "0.5.0"})
    assert r.status_code == 200
    assert [f["severity"] for f in r.json()["files"][0]["findings"] if f["code"] == "RA-A016"] == ["error"]
    r = client.post("/v1/validate?automodel_version=someday", content=old,
                    headers={"content-type": "application/yaml"})
    assert r.status_code == 400 and "automodel_version" in r.text


def test_recipes_automodel_fixed_upstream_are_errors_on_the_changed_key_and_the_fixes_are_clean():
    """Three upstream example recipes as they were before and after the AutoModel commit that fixed them
    (tests/service/validate/automodel_fixes; benchmarks/automodel_fixes.py measures the whole history)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from automodel_fixes import fixture_pairs, judge

    outcomes = {pair.name.split(".")[0]: judge(pair, stated=True) for pair in fixture_pairs()}
    assert {name: codes for name, (codes, _) in outcomes.items()} == {
        "lora_keywords": ["RA-A009", "RA-A011"], "moved_target": ["RA-A014", "RA-A016"],
        "stale_moe_config": ["RA-A016"]}
    assert all(not fixed_only for _, fixed_only in outcomes.values())
