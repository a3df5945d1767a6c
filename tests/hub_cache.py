"""A Hugging Face hub cache laid out in a temporary folder, for tests that resolve models offline."""

from __future__ import annotations

import json
from pathlib import Path


def cache_repo(cache: Path, repo_id: str, config: dict) -> None:
    """Lay out one repo the way huggingface_hub's cache does: refs/main -> snapshots/<commit>/."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
