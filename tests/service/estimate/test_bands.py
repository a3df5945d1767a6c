"""The error band within which a recipe's layout is kept: the family's out-of-sample error from the stored
cross-validation (service/estimate/family_bands.json), the median where the family is not known well enough."""

from __future__ import annotations

import json
import math
import sys

import pytest

from service.estimate import constants as C
from service.estimate.bands import BANDS_FILE, MIN_FAMILY_RECORDS, error_band
from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import step_time_cv as cv  # noqa: E402


def _stored() -> dict:
    return json.loads(BANDS_FILE.read_text())


def test_a_family_known_from_enough_setups_gets_its_own_band_and_says_so():
    band = error_band("DeepSeek-V3", True)
    assert band.value == _stored()["families"]["DeepSeek-V3"]["out_of_sample"] > 0.5
    assert band.basis == "the DeepSeek-V3 family's out-of-sample error (21 published setups)"
    assert error_band("GPT-OSS", True).value < error_band("Qwen3 MoE", True).value < band.value


def test_a_family_with_few_setups_or_none_gets_the_median_of_its_kind():
    stored = _stored()
    assert stored["families"]["Kimi K2"]["records"] < MIN_FAMILY_RECORDS
    few = error_band("Kimi K2", True)
    assert few.value == stored["median"]["moe"] and "fewer than" in few.basis
    unknown = error_band("Someone's MoE", True)
    assert unknown.value == stored["median"]["moe"] and "no published setup" in unknown.basis
    assert error_band(None, False).value == stored["median"]["dense"]


@pytest.mark.slow
def test_the_stored_band_is_what_the_cross_validation_computes():
    """One family held out again (fit without it, score it): the stored figure is the script's, not typed in."""
    shipped = {name: getattr(C, name) for name in cv.GRID}
    moe = [r for r in cv.newest_records(json.loads(cv.DATA.read_text())) if cv.find_bundled_model(r["model"]).is_moe]
    try:
        cv.fit([r for r in moe if cv.family(r) != "GPT-OSS"], shipped)
        rows = cv.score([r for r in moe if cv.family(r) == "GPT-OSS"])
    finally:
        cv._set(shipped)
    outside = cv.median_abs([math.log(row["estimate"] / row["measured"]) for row in rows])
    assert round(outside, 4) == _stored()["families"]["GPT-OSS"]["out_of_sample"]
    assert "benchmarks/step_time_cv.py --write-bands" in _stored()["provenance"]
