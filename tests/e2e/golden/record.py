"""Record the answers of every case in cases.json to answers.json.

    python tests/e2e/golden/record.py

Run it only where the current behaviour is the one to freeze; tests/e2e/test_recorded_answers.py then
replays the cases and compares each answer with the recorded one. A new case: add it to cases.json (the format
is in replay.py), record, and read its answer in answers.json before keeping it.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder is on sys.path but the repository root, which holds the code under test and
# the `tests` package, may not be.
REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.e2e.golden.replay import ANSWERS_FILE, CLI_MAIN, HTTP_APP, Replayer, answers_text, load_cases  # noqa: E402


def main() -> int:
    cases = load_cases()
    with Replayer(CLI_MAIN, HTTP_APP) as replayer:
        answers = {case["name"]: replayer.answer(case) for case in cases}
    server_errors = [name for name, answer in answers.items() if answer.get("status", 0) >= 500]
    ANSWERS_FILE.write_text(answers_text(answers), encoding="utf-8")
    print(f"recorded {len(answers)} answers to {ANSWERS_FILE.relative_to(REPO_ROOT)}")
    if server_errors:  # the service promises a 4xx for any bad input: a 500 is a defect, not a behaviour to freeze
        print(f"warning: server errors recorded for {', '.join(server_errors)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
