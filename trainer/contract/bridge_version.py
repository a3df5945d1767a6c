"""``metadata.bridge_version``: the Megatron Bridge release (or checkout date) whose defaults a config assumes.

A release (``0.5.1``, ``v0.6.0``, ``0.6.0rc1``), a checkout's commit date (``2026-07-01``), or ``main``/``latest``
(the newest defaults). Pure Python: the schema (trainer/contract/config.py) and validate read it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Optional, Union

_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:rc\d+)?$")
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
NEWEST = ("main", "latest")
FORMS = "a release (0.5.1, v0.6.0), a checkout's commit date (2026-07-01), or main/latest"


@dataclass(frozen=True)
class MovedDefault:
    """A default that Megatron Bridge changed: what an unset key meant before the change and after it."""

    key: str
    commit: str
    date: dt.date
    release: tuple[int, int, int]  # the first release that has the change
    before: str
    after: str

    def applies_after(self, version: "BridgeVersion") -> bool:
        if version.newest:
            return True
        if version.date is not None:
            return version.date >= self.date
        return version.release >= self.release

    @property
    def since(self) -> str:
        return f"Megatron Bridge v{'.'.join(map(str, self.release))} (commit {self.commit}, {self.date.isoformat()})"


# src/megatron/bridge/models/transformer_config.py _set_moe_expert_tensor_parallel_default (PR #4579): before it,
# Megatron-Core's ModelParallelConfig.__post_init__ set an unset expert_tensor_parallel_size to TP.
ETP_DEFAULT = MovedDefault(key="distributed.etp_size", commit="6f2f546e", date=dt.date(2026, 7, 1),
                           release=(0, 6, 0), before="TP", after="1 (with EP > 1)")
# scripts/training/run_recipe.py (PR #4856, the shared launcher) synchronizes model.seq_length from the dataset's
# after the overrides; before it nothing did, and training/config.py ConfigContainer.validate() asserts they match.
SEQ_LENGTH_SYNC = MovedDefault(key="model.seq_length", commit="e28e1ca3", date=dt.date(2026, 7, 15),
                               release=(0, 6, 0), before="must equal dataset.seq_length",
                               after="synchronized from dataset.seq_length by run_recipe.py")


@dataclass(frozen=True)
class BridgeVersion:
    text: str
    release: tuple[int, int, int] = (0, 0, 0)
    date: Optional[dt.date] = None
    newest: bool = False


def parse_bridge_version(value: Union[str, dt.date, float, int]) -> BridgeVersion:
    """A version as written; ValueError naming the accepted forms otherwise."""
    if isinstance(value, dt.datetime):
        value = value.date()
    if isinstance(value, dt.date):
        return BridgeVersion(value.isoformat(), date=value)
    text = str(value).strip()
    if text.lower() in NEWEST:
        return BridgeVersion(text, newest=True)
    release = _RELEASE.match(text)
    if release:
        return BridgeVersion(text, release=(int(release[1]), int(release[2]), int(release[3] or 0)))
    date = _DATE.match(text)
    if date:
        try:
            return BridgeVersion(text, date=dt.date(int(date[1]), int(date[2]), int(date[3])))
        except ValueError:
            pass
    raise ValueError(f"{text!r} is not a Megatron Bridge version: write {FORMS}")
