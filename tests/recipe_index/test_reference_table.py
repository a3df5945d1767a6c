"""Every recipe of the Megatron Bridge reference table, converted to our format, validates with
0 errors, except the recipes that really are inconsistent: those get the matching finding.

The reference's own `consistency_flags` say which recipes are wrong; a few more errors that our
rules find beyond the flags are listed, with reasons, in recipe_index/known_issues.py.
"""

import json
import os
from pathlib import Path

import pytest
import yaml

from recipe_index import convert_record
from recipe_index.known_issues import KNOWN_ISSUES
from recipe_index.megatron import short_name
from service.validate.document import validate_text
from tests.paths import REPO

# The tests read one validation of all 630 recipes (`reports`, 8 s): one worker builds it.
pytestmark = pytest.mark.xdist_group("reference_table_reports")

SHARED = Path(os.environ.get("RECIPE_ADVISOR_SHARED", REPO.parent / "shared"))
TABLE = SHARED / "reference" / "mbridge_recipes.json"

# consistency flag (prefix) -> the finding codes that name the same inconsistency
FLAG_CODES = {
    "model.seq_length": {"RA-C004"},
    "num_gpus not divisible by PP*EP*ETP": {"RA-L007"},
    "num_gpus below min_gpus_computed": {"RA-L006", "RA-L007"},
    "sequence_parallel=True with TP=1": {"RA-L004"},
    "GBS not divisible by MBS*DP": {"RA-B001"},
    "EP>1 and TP>1 without SP": {"RA-L012"},
    "precision token in name": {"RA-C005"},
}
REAL_INCONSISTENCIES = {"RA-L006", "RA-L007", "RA-B001"}  # Megatron raises on these


def flag_codes(flag: str) -> set[str]:
    for prefix, codes in FLAG_CODES.items():
        if flag.startswith(prefix):
            return codes
    raise AssertionError(f"unmapped consistency flag: {flag}")


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf")))
        yield


@pytest.fixture(scope="module")
def reports(offline):
    records = json.loads(TABLE.read_text())
    assert len(records) == 630
    out = []
    for record in records:
        text = yaml.safe_dump(convert_record(record), sort_keys=False)
        out.append((record, validate_text(text, record["name"]).findings))
    return out


def test_clean_recipes_have_no_errors_and_flagged_ones_get_their_finding(reports):
    problems = []
    flagged = 0
    for record, findings in reports:
        found = {f.code for f in findings}
        errors = {f.code for f in findings if f.severity == "error"}
        expected = [flag_codes(flag) for flag in record["consistency_flags"]]
        flagged += bool(expected)
        for codes in expected:
            if not codes & found:
                problems.append(f"{record['name']}: flag expects one of {sorted(codes)}, got {sorted(found)}")
        allowed = set().union(*expected) if expected else set()
        allowed |= set(KNOWN_ISSUES.get(short_name(record), ()))
        if errors - allowed:
            problems.append(f"{record['name']}: unexpected errors {sorted(errors - allowed)}: "
                            + "; ".join(f.message for f in findings if f.code in errors - allowed))
    assert flagged >= 40
    assert problems == []


def test_real_inconsistencies_are_errors(reports):
    for record, findings in reports:
        for flag in record["consistency_flags"]:
            codes = flag_codes(flag) & REAL_INCONSISTENCIES
            if codes:
                assert {f.code for f in findings if f.severity == "error"} & codes, record["name"]


def test_known_issues_are_not_stale(reports):
    by_name = {short_name(r): {f.code for f in fs if f.severity == "error"} for r, fs in reports}
    for name, codes in KNOWN_ISSUES.items():
        assert set(codes) <= by_name[name], f"{name}: {codes} no longer found"


def test_bundled_index_has_zero_errors_and_keeps_known_issues_visible():
    paths = sorted((REPO / "recipe_index" / "recipes").rglob("*.yaml"))
    assert len(paths) > 500
    marked = 0
    for path in paths:
        findings = validate_text(path.read_text(), str(path)).findings
        assert [f for f in findings if f.severity == "error"] == [], path
        marked += any(f.message.startswith("known upstream issue") for f in findings)
    assert marked == len(KNOWN_ISSUES.keys() & {p.stem for p in paths})  # some records' models are not bundled
    # Every entry names a real Bridge record, so a misspelt one cannot hide behind the intersection.
    from recipe_index.generate import load_reference

    assert KNOWN_ISSUES.keys() <= {short_name(r) for r in load_reference("mbridge_recipes.json")}
