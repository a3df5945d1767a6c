"""The benchmark scripts as modules, for tests that call their functions in process (no interpreter of their own
to start)."""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType

from tests.paths import REPO


@functools.lru_cache(maxsize=None)
def load_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported once per test process."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
