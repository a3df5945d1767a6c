"""The error band within which `recommend` keeps a recipe's layout over the planner's estimate.

The band is the step-time estimate's out-of-sample error for the model's family (median absolute error against
published throughput, that family held out of the fit: ``family_bands.json``, written by
``benchmarks/step_time_cv.py --write-bands``), where the family has at least MIN_FAMILY_RECORDS published setups;
else the median over every family of its kind (dense or MoE). A median of fewer setups says little about the
family: one DeepSeek-like outlier would set it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

BANDS_FILE = Path(__file__).with_name("family_bands.json")
MIN_FAMILY_RECORDS = 5


@dataclass(frozen=True)
class ErrorBand:
    value: float  # 0.27: the estimate is off by 27 % (median) on this kind of model
    basis: str  # which band applied, in words

    def to_dict(self) -> dict:
        return {"value": self.value, "basis": self.basis}


@lru_cache(maxsize=1)
def _document() -> dict:
    return json.loads(BANDS_FILE.read_text(encoding="utf-8"))


def error_band(family: Optional[str], is_moe: bool) -> ErrorBand:
    """The family's own out-of-sample error when it is known from enough published setups, else the median."""
    document = _document()
    kind = "moe" if is_moe else "dense"
    known = document["families"].get(family or "")
    if known and known["kind"] == kind and known["records"] >= MIN_FAMILY_RECORDS:
        return ErrorBand(known["out_of_sample"], f"the {family} family's out-of-sample error "
                                                 f"({known['records']} published setups)")
    median = document["median"][kind]
    why = (f"{family} has {known['records']} published setup(s), fewer than {MIN_FAMILY_RECORDS}" if known
           else f"no published setup of {family or 'this model'}'s family")
    return ErrorBand(median, f"the median out-of-sample error over {'MoE' if is_moe else 'dense'} families ({why})")
