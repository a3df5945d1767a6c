"""Replays the recorded CLI and HTTP cases in this process; shared by ``record.py`` and the test.

A case (``cases.json``) is either
- ``{"name", "kind": "cli", "argv": [...], "stdin": optional text}``: ``argv`` given to the CLI's ``main``, or
- ``{"name", "kind": "http", "method", "path", "headers", "json" | "data" | "files" | "content"}``: one request
  through ``fastapi.testclient.TestClient``; ``files`` maps a form field to ``[filename, text, content type]``.

Its answer is, for the CLI, the exit code, stdout and stderr; for HTTP, the status, the content type and the
body. Texts are kept as lists of lines (line ends included) so that ``answers.json`` reads and diffs line by
line; joined, they are the exact text.

Cases run from the repository root (input files are named relative to it), in the order of ``cases.json``.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator
from unittest import mock

GOLDEN_DIR = Path(__file__).resolve().parent
REPO_ROOT = GOLDEN_DIR.parents[2]
CASES_FILE = GOLDEN_DIR / "cases.json"
ANSWERS_FILE = GOLDEN_DIR / "answers.json"
# Where the CLI's entry point and the HTTP app live ("module:attribute").
CLI_MAIN = "service.cli.app:main"
HTTP_APP = "service.http.app:app"

# The environment every case runs in, so that an answer does not depend on where the replay runs:
# - argparse wraps usage and help at the terminal width (COLUMNS, else the width of the terminal the process
#   runs in): fixed, so an error's usage lines read the same in a terminal, a pipe or CI;
# - model lookups may reach the Hugging Face Hub: kept offline (as `make test` and CI run), and the service's
#   opt-in to Hub lookups is off, as an operator leaves it by default;
# - plan and recommend read the user's runs store (docs/runs.md): named here as a file no case creates, so that the
#   runs of whoever replays do not enter the answers.
NO_RUNS_STORE = os.path.join(tempfile.gettempdir(), "recipe-advisor-golden", "no-runs-store.sqlite")
ENVIRONMENT = {"COLUMNS": "80", "HF_HUB_OFFLINE": "1", "RECIPE_ADVISOR_DB": NO_RUNS_STORE}
ENVIRONMENT_UNSET = ("RECIPE_ADVISOR_ALLOW_HUB",)

TEXT_FIELDS = ("stdout", "stderr", "body")


def resolve(location: str) -> Any:
    """The object at ``"package.module:attribute"``."""
    module_name, _, attribute = location.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def load_cases() -> list[dict]:
    cases = json.loads(CASES_FILE.read_text(encoding="utf-8"))
    names = [case["name"] for case in cases]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{CASES_FILE.name}: case names must be unique; repeated: {', '.join(duplicates)}")
    return cases


def load_answers() -> dict[str, dict]:
    return json.loads(ANSWERS_FILE.read_text(encoding="utf-8"))


def answers_text(answers: dict[str, dict]) -> str:
    return json.dumps(answers, indent=1, ensure_ascii=False) + "\n"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


@contextlib.contextmanager
def case_surroundings() -> Iterator[None]:
    """The repository root as working folder and the fixed ENVIRONMENT, restored afterwards."""
    previous = os.getcwd()
    with mock.patch.dict(os.environ, ENVIRONMENT):
        for name in ENVIRONMENT_UNSET:
            os.environ.pop(name, None)
        os.chdir(REPO_ROOT)
        try:
            yield
        finally:
            os.chdir(previous)


def _stdin_stream(text: str | None) -> io.TextIOWrapper:
    # A text stream over bytes: the CLI reads stdin as bytes (sys.stdin.buffer) to check the encoding itself.
    return io.TextIOWrapper(io.BytesIO((text or "").encode("utf-8")), encoding="utf-8")


def run_cli(cli_main: Callable[[list[str]], int], case: dict) -> dict:
    stdout, stderr = io.StringIO(), io.StringIO()
    with mock.patch.object(sys, "stdin", _stdin_stream(case.get("stdin"))), \
            contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            exit_code = cli_main(list(case["argv"]))
        except SystemExit as exit_:  # argparse's errors and --help
            exit_code = exit_.code
    if exit_code is None:
        exit_code = 0
    return {"exit_code": exit_code, "stdout": _lines(stdout.getvalue()), "stderr": _lines(stderr.getvalue())}


REQUEST_BODY_KEYS = ("json", "data", "content")


def run_http(client, case: dict) -> dict:
    request: dict[str, Any] = {key: case[key] for key in REQUEST_BODY_KEYS if key in case}
    if "files" in case:
        request["files"] = {field: tuple(spec) for field, spec in case["files"].items()}
    response = client.request(case["method"], case["path"], headers=case.get("headers"), **request)
    return {
        "status": response.status_code,
        "content_type": response.headers.get("content-type"),
        "body": _lines(response.content.decode("utf-8", errors="backslashreplace")),
    }


class Replayer:
    """Runs cases against one CLI entry point and one app (a single TestClient for every HTTP case)."""

    def __init__(self, cli_main_location: str, http_app_location: str):
        from fastapi.testclient import TestClient

        self.cli_main = resolve(cli_main_location)
        # A server error becomes a recorded 500, compared like any other answer, not an exception in the client.
        self.client = TestClient(resolve(http_app_location), raise_server_exceptions=False)

    def __enter__(self) -> "Replayer":
        self.client.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.client.__exit__(*exc_info)

    def answer(self, case: dict) -> dict:
        with case_surroundings():
            if case["kind"] == "cli":
                return run_cli(self.cli_main, case)
            if case["kind"] == "http":
                return run_http(self.client, case)
        raise ValueError(f"case {case['name']!r}: unknown kind {case['kind']!r} (cli or http)")


def _marked(lines: list[str]) -> list[str]:
    """Lines without their ends, a last line that has none marked as git marks it (else the diff could not show it)."""
    return [line[:-1] if line.endswith("\n") else line + "\\ (no newline at the end)" for line in lines]


def _readable(want: list[str], got: list[str], field: str) -> tuple[list[str], list[str], str]:
    """JSON texts indented, when both are JSON and differ in more than their layout: an API body is one line
    (the OpenAPI schema some 50,000 characters), whose diff would not show where it differs."""
    try:
        want_json, got_json = json.loads("".join(want)), json.loads("".join(got))
    except ValueError:
        return want, got, field
    if want_json == got_json:  # the same values written otherwise: only the raw texts show how
        return want, got, field
    indented = [_lines(json.dumps(value, indent=1, ensure_ascii=False) + "\n") for value in (want_json, got_json)]
    return indented[0], indented[1], f"{field} (JSON, indented here)"


def difference(expected: dict, actual: dict) -> str:
    """What differs between two answers of one case: scalar fields side by side, texts as a unified diff."""
    parts = []
    for field in dict.fromkeys([*expected, *actual]):
        want, got = expected.get(field), actual.get(field)
        if want == got:
            continue
        if field in TEXT_FIELDS:
            want, got, label = _readable(want or [], got or [], field)
            diff = difflib.unified_diff(_marked(want), _marked(got), f"recorded {label}", f"replayed {label}",
                                        lineterm="")
            parts.append("\n".join(diff))
        else:
            parts.append(f"{field}: recorded {want!r}, replayed {got!r}")
    return "\n".join(parts)
