"""The limits on an HTTP request's headers and their defaults, read by ``service.http.server_protocol`` in
every worker and set by ``recipe-advisor serve`` (here, below both front ends, which import neither each other).

They come from the environment (``serve`` sets them from its options), because ``--workers`` starts fresh
processes that import the protocol class by name and inherit only the environment.
"""

from __future__ import annotations

import os
from typing import Any

MAX_HEADER_BYTES = 64 * 1024  # request line and headers; browsers send a few KiB, cookies included
HEADER_TIMEOUT_S = 10.0
MAX_HEADER_BYTES_ENV = "RECIPE_ADVISOR_MAX_HEADER_BYTES"
HEADER_TIMEOUT_ENV = "RECIPE_ADVISOR_HEADER_TIMEOUT"


def header_limits() -> tuple[int, float]:
    """(max header bytes, header timeout in seconds) from the environment, else the defaults."""
    def read(name: str, kind: type, default: Any) -> Any:
        try:
            value = kind(os.environ[name])
        except (KeyError, ValueError):
            return default
        return value if value > 0 else default

    return read(MAX_HEADER_BYTES_ENV, int, MAX_HEADER_BYTES), read(HEADER_TIMEOUT_ENV, float, HEADER_TIMEOUT_S)
