"""A serving-only install (the Docker image, the pre-commit hook: the package without the train extra) has
no torch on disk. Validate reads torch's source for `_target_` keywords; where there is none to read, it
leaves them unchecked and does not call torch.optim.AdamW unknown (every recipe failed)."""

from __future__ import annotations

import importlib.util

import pytest
from fastapi.testclient import TestClient

from service.recommend.recommendation import recommend
from service.validate import document as validate_module
from service.validate.rules import targets
from tests.paths import REPO
from trainer.contract import source_reader


@pytest.fixture
def without_torch(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] == "torch" else real(name, *args, **kwargs)

    for cached in (targets.signature_of, source_reader.parse, source_reader.literal_defaults):
        cached.cache_clear()
    monkeypatch.setattr(source_reader.importlib.util, "find_spec", find_spec)
    yield
    for cached in (targets.signature_of, source_reader.parse, source_reader.literal_defaults):
        cached.cache_clear()


def s002(report) -> list:
    return [f for f in report.findings if f.code == "RA-S002"]


def test_validate_takes_torch_targets_as_the_trainers_own_instead_of_refusing_them(without_torch):
    text = (REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml").read_text()
    report = validate_module.validate_text(text, "c.yaml")
    assert [f.severity for f in report.findings if f.severity == "error"] == []
    assert s002(report) == []  # not even an info line on every config (the pre-commit hook has no torch)


def test_a_misspelt_target_is_still_an_error_naming_the_registered_spelling(without_torch):
    report = validate_module.validate_text("optimizer:\n  _target_: trainer.no_such_thing.Adam\n", "c.yaml")
    [finding] = [f for f in report.findings if f.code == "RA-S001"]
    assert finding.severity == "error" and "torch.optim.Adam" in finding.fix


def test_recommend_and_the_api_work_without_torch(without_torch):
    rec = recommend("tiny-llama", 2, "cpu", engine="bundled")
    assert not [f for f in rec.findings if f.severity == "error"]
    from service.http.app import create_app  # a fresh app: its response cache must not keep this answer

    response = TestClient(create_app()).post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                           "goal": "sft"})
    assert response.status_code == 200, response.text


def test_with_torch_installed_the_keywords_are_checked():
    report = validate_module.validate_text("optimizer:\n  _target_: torch.optim.AdamW\n  lrr: 0.1\n", "c.yaml")
    assert [(f.severity, f.key) for f in s002(report)] == [("error", "optimizer.lrr")]
