"""Only the registry's callables may be named by a config: every public callable under ``trainer.``, ``torch.nn.``
and ``torch.optim.`` is refused in every section but the one the registry lists it for, by validate (RA-S001)
and by train's pre-flight alike; the registry's signatures are the installed callables' own; the attack that a
prefix allow-list let through (``trainer.contract.atomic_files.write_atomic`` writing a file) is refused by
validate, the API, recommend and train, each with exit 2 or a finding, and nothing is written."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import warnings
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from service.validate.rules.config_rules import target_allowed
from tests.cli import TINY_ON_CPU, run_cli
from tests.trainer.harness import write_config
from trainer.contract.builders import check_target
from trainer.contract.overrides import ConfigError
from trainer.contract.target_registry import REGISTRY, registered

SECTIONS = ("optimizer", "dataset", "validation_dataset", "loss_fn", "model", "recipe")
ATTACK = {"_target_": "trainer.contract.atomic_files.write_atomic", "path": "x.pth", "text": "import os"}


def _public_callables(package: str) -> set[str]:
    """``module.name`` of every public callable in every importable public module under ``package``."""
    root = importlib.import_module(package)
    modules = [root]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in pkgutil.walk_packages(root.__path__, package + ".", onerror=lambda name: None):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            try:
                modules.append(importlib.import_module(info.name))
            except Exception:  # optional dependencies of torch.nn's corners (onnx, triton, ...)
                continue
    return {f"{module.__name__}.{name}" for module in modules for name, obj in vars(module).items()
            if not name.startswith("_") and callable(obj) and not isinstance(obj, types.ModuleType)}


@pytest.fixture(scope="module")
def every_public_callable() -> set[str]:
    names = set().union(*(_public_callables(p) for p in ("trainer", "torch.nn", "torch.optim")))
    assert "trainer.contract.atomic_files.write_atomic" in names and "torch.nn.Linear" in names
    return names


def _validate_refuses(data: dict) -> set[str]:
    """The keys RA-S001 refuses in ``data``."""
    return {v.key for v in target_allowed(SimpleNamespace(doc=SimpleNamespace(data=data)))}  # fixes stay deferred


def _preflight_refuses(target: str, section: str) -> bool:
    try:
        check_target(target, section)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{section}._target_: ")
        return True
    return False


@pytest.mark.slow  # imports every module of torch.nn
def test_only_the_registry_is_accepted_by_validate_and_the_preflight(every_public_callable):
    accepted = set()
    for name in sorted(every_public_callable):
        refused_by_validate = _validate_refuses({section: {"_target_": name} for section in SECTIONS})
        for section in SECTIONS:
            expected = registered(section, name) is not None
            assert (f"{section}._target_" not in refused_by_validate) == expected, (name, section)
            assert (not _preflight_refuses(name, section)) == expected, (name, section)
            if expected:
                accepted.add((section, name))
    in_registry = {(section, entry.path) for section in SECTIONS for entry in REGISTRY[section]}
    import torch

    missing_here = {(s, n) for s, n in in_registry - accepted if not hasattr(torch.optim, n.rsplit(".", 1)[-1])}
    assert accepted | missing_here == in_registry  # every registry name is a public callable (where installed)


def test_sections_with_fixed_choices_name_no_callable():
    for section in ("lr_scheduler", "peft", "collator", "rng", "checkpoint.extra"):
        data = {"lr_scheduler": {"_target_": "torch.optim.lr_scheduler.LambdaLR"}, "peft": {"_target_": "x.y"},
                "collator": {"_target_": "trainer.data.collate"}, "checkpoint": {"extra": {"_target_": "os.system"}},
                "rng": {"_target_": "trainer.data.MockDataset"}}
        assert section + "._target_" in _validate_refuses(data)


@pytest.mark.parametrize("section", sorted({s for s in SECTIONS}))
def test_registry_signatures_are_the_installed_callables_own(section):
    from trainer.components.targets import resolve_target

    for entry in REGISTRY[section]:
        try:
            fn = resolve_target(entry.path, section)
        except ConfigError as exc:  # a newer torch's optimizer (Muon) on an older torch
            assert "in this install" in str(exc)
            continue
        params = inspect.signature(fn).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        assert takes_any or set(entry.keywords + entry.supplied) <= named, (entry.path, named)
        required = {n for n in named if params[n].default is inspect.Parameter.empty}
        assert required <= set(entry.keywords + entry.supplied), (entry.path, required)


def test_the_write_atomic_attack_is_refused_everywhere(tmp_path, capsys, monkeypatch):
    from service.cli.train import run_argv
    from service.http.app import create_app
    from trainer.launch import run

    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, {"optimizer": ATTACK})
    code, out, err = run_cli(capsys, "validate", str(config))
    assert code != 0 and "RA-S001 error: _target_ 'trainer.contract.atomic_files.write_atomic'" in out + err
    response = TestClient(create_app()).post("/v1/validate", content=config.read_text(),
                                             headers={"content-type": "text/plain"})
    findings = response.json()["files"][0]["findings"]
    assert response.status_code == 200
    assert [f for f in findings if f["code"] == "RA-S001" and f["key"] == "optimizer._target_"
            and "torch.optim.AdamW" in f["fix"]]
    code, out, err = run_cli(capsys, "recommend", *TINY_ON_CPU, "-o", str(tmp_path / "rec.yaml"), "--optimizer",
                             "{_target_: trainer.contract.atomic_files.write_atomic, path: x.pth, text: hi}")
    assert code == 2 and "RA-S001" in out + err and not (tmp_path / "rec.yaml").exists()
    assert run_argv([str(config), "--dry-run"]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert line.startswith("error: optimizer._target_: trainer.contract.atomic_files.write_atomic is not a "
                           "registered optimizer callable")
    assert run([str(config)]) == 2  # a trainer process started without the launcher refuses it the same way
    assert not (tmp_path / "x.pth").exists()
