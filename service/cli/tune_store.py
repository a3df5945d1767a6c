"""The runs store the `tune` command records its trials in (service/cli/tune.py and tune_sweep.py open it)."""

from __future__ import annotations

import argparse


def open_store(args: argparse.Namespace):
    """The store at ``--db``, or None with ``--no-store``."""
    if args.no_store:
        return None
    from service.runs.store import RunsStore

    return RunsStore(args.db)
