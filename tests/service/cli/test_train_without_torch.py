"""A serving-only install (`make serve`, the Docker image, the pre-commit hook) has no torch: `train` says the
trainer's dependencies are missing and how to install them, and validate takes torch.optim targets as the
trainer's own imports, not as typos."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import BUNDLED_RECIPES, REPO

# torch unimportable, as where it is not installed: importlib.util.find_spec("torch") answers None too.
WITHOUT_TORCH = ("import sys\nsys.modules['torch'] = None\n"
                 "from service.cli.app import main\nsys.exit(main(sys.argv[1:]))")


def _cli_without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def _recipe(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((BUNDLED_RECIPES / "tiny_llama_pretrain.yaml").read_text())
    assert cfg["optimizer"]["_target_"].startswith("torch.optim.")
    cfg["checkpoint"]["checkpoint_dir"] = str(tmp_path / "ckpt")
    path = tmp_path / "configs" / "c.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_train_without_torch_says_how_to_install_the_trainer(tmp_path, dry_run):
    """It said `optimizer._target_: torch.optim.AdamW cannot be found (module torch.optim not found)`."""
    result = _cli_without_torch("train", str(_recipe(tmp_path)), "--nproc-per-node", "1", *dry_run)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "cannot be found" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: the trainer's dependencies are not installed here (no torch)")
    assert "pip install '.[train]'" in result.stderr
    assert not (tmp_path / "ckpt").exists(), "nothing was created"


def test_validate_without_torch_says_nothing_about_torch_targets(tmp_path):
    """The pre-commit hook printed an RA-S002 info line on every config naming torch.optim."""
    result = _cli_without_torch("validate", str(_recipe(tmp_path)), "--format", "json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "RA-S002" not in result.stdout and "torch is not installed" not in result.stdout, result.stdout
