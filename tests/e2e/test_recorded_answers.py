"""The CLI and the HTTP service answer every recorded case exactly as recorded (tests/e2e/golden/).

A behaviour freeze: the answers were recorded with ``python tests/e2e/golden/record.py`` and must stay
byte for byte the same while code moves. Record again only for an intended change of behaviour.
"""

from __future__ import annotations

import pytest

from tests.e2e.golden.replay import CLI_MAIN, HTTP_APP, Replayer, difference, load_answers, load_cases

CASES = load_cases()


@pytest.fixture(scope="module")
def replayer():
    with Replayer(CLI_MAIN, HTTP_APP) as replayer:
        yield replayer


@pytest.fixture(scope="module")
def recorded_answers() -> dict[str, dict]:
    return load_answers()


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_answer_is_as_recorded(case: dict, replayer: Replayer, recorded_answers: dict[str, dict]) -> None:
    assert case["name"] in recorded_answers, (
        f"no recorded answer for {case['name']!r}: run python tests/e2e/golden/record.py")
    expected, actual = recorded_answers[case["name"]], replayer.answer(case)
    if actual != expected:
        # Only the difference: pytest's own report would print both answers, each of up to thousands of lines.
        pytest.fail(f"{case['name']}: the answer differs from the recorded one\n{difference(expected, actual)}",
                    pytrace=False)


def test_every_recorded_answer_has_a_case(recorded_answers: dict[str, dict]) -> None:
    stale = sorted(set(recorded_answers) - {case["name"] for case in CASES})
    assert not stale, f"answers.json holds answers of cases no longer in cases.json: {', '.join(stale)}"
