"""The step-time error that benchmarks/step_time_cv.py reports out of sample: one record per setup (its newest
release), each MoE family estimated with constants fitted without it, and floors under the figures."""

from __future__ import annotations

import json
import sys

from recipe_index.measurements import release_order
from service.estimate import constants as C
from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import step_time_cv as cv  # noqa: E402


def _records() -> list[dict]:
    return json.loads(cv.DATA.read_text())


def test_each_setup_counts_once_at_its_newest_release():
    records = _records()
    newest = cv.newest_records(records)
    keys = [cv.request_key(r) + cv.layout_key(r) for r in newest]
    assert len(keys) == len(set(keys))
    for kept in newest:
        same = [r for r in records if cv.scorable(r) and cv.request_key(r) + cv.layout_key(r) ==
                cv.request_key(kept) + cv.layout_key(kept)]
        assert release_order(kept.get("release")) == max(release_order(r.get("release")) for r in same)


def test_a_held_out_family_is_estimated_with_constants_fitted_without_it():
    shipped = {name: getattr(C, name) for name in cv.GRID}
    moe = [r for r in cv.newest_records(_records()) if cv.find_bundled_model(r["model"]).is_moe]
    try:
        without = cv.fit([r for r in moe if cv.family(r) != "DeepSeek-V3"], shipped)
        with_all = cv.fit(moe, shipped)
    finally:
        cv._set(shipped)
    assert without != with_all  # the held-out family moves the fit: it was not seen
    logs = cv.errors([r for r in moe if cv.family(r) != "DeepSeek-V3"], without)
    cv._set(shipped)
    assert cv.median_abs(logs) < 0.30
