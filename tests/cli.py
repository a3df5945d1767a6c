"""Running the command line in process, for tests of what it prints."""

from __future__ import annotations

from service.cli.app import main

TINY_ON_CPU = ["--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"]
"""Flags of a request the bundled trainer runs on 2 CPU processes."""


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``main(argv)``'s exit code, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
