"""Text from a config, made safe to print: one line, and bounded.

A key, a file name or a value comes from the user (or a pull request). Printed raw, a newline in it
starts a line of its own in a CI log, where GitHub reads ``::error ...`` lines as workflow commands, and
a YAML alias can repeat one large value many times. Pure Python: the trainer and the service both use it.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with control characters written as escapes (``\\n``, ``\\x1b``)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def clipped(text: str, limit: int = 1000, keep: int = 200) -> str:
    """``text`` itself up to ``limit`` characters, else its first ``keep`` and its length."""
    return text if len(text) <= limit else f"{text[:keep]}... ({len(text):,} characters)"
