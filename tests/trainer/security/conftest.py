"""Fixtures of the checkpoint-security tests: each layout's real checkpoint, built once per session on demand."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tests.trainer.security.layouts import train_layout


@pytest.fixture(scope="session")
def checkpoint_of(tmp_path_factory) -> Callable[[str], Path]:
    """``checkpoint_of("tp")``: the one-step checkpoint of that layout (trained at the first call)."""
    built: dict[str, Path] = {}

    def get(layout: str) -> Path:
        if layout not in built:
            built[layout] = train_layout(tmp_path_factory.mktemp(f"layout_{layout}"), layout)
        return built[layout]

    return get
