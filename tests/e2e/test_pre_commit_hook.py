"""The pre-commit hook this repository publishes checks YAML in recipe folders only."""

from __future__ import annotations

import pytest
import yaml

from tests.paths import REPO


@pytest.mark.parametrize("path, checked", [
    ("recipes/llama.yaml", True), ("team/configs/sft/a.yml", True), ("recipe/x.yaml", True),
    (".github/workflows/ci.yml", False), (".pre-commit-config.yaml", False), ("docker-compose.yml", False),
    ("recipes/README.md", False), ("configs/.github/x.yaml", False)])
def test_the_pre_commit_hook_checks_recipe_folders_only(path, checked):
    """The hook matched every YAML, failing any commit that touched a workflow."""
    import re


    [hook] = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert bool(re.search(hook["files"], path) and not re.search(hook["exclude"], path)) is checked
