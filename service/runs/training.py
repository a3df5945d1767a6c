"""`recipe-advisor train` records its run when it ends: completed, stopped (what it reached), or crashed.

The record is made from the trainer's own metrics (``training.jsonl`` in the checkpoint_dir) and the config as
it ran (file plus overrides). It never changes the exit code of ``train``: a store that cannot be written is a
warning. ``RECIPE_ADVISOR_RECORD_RUNS=0`` turns recording off.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Optional

import yaml

from service.runs.bundled import METRICS_FILE, read_metrics, record_from_metrics, request_and_layout
from service.runs.errors import RunInputError
from service.runs.ingest import driver_here, labels, prepared, software_here, speed_env
from service.runs.schema import RunRecord

RECORD_ENV = "RECIPE_ADVISOR_RECORD_RUNS"
EXIT_CONFIG = 2


def outcome_of(exit_code: int) -> tuple[str, Optional[str]]:
    """The outcome of a `train` exit code: 0 completed, a signal stopped, a config error refused, else crashed."""
    if exit_code == 0:
        return "completed", None
    if exit_code > 128:
        name = signal.Signals(exit_code - 128).name if exit_code - 128 in signal.Signals._value2member_map_ else ""
        return "stopped", f"stopped by {name or f'signal {exit_code - 128}'}"
    if exit_code == EXIT_CONFIG:
        return "refused", "the workers refused the config"
    return "crashed", f"train exited with code {exit_code}"


def _release(software: dict) -> str:
    """Calibration groups bundled runs by the trainer's release and torch's: both change its speed."""
    return f"recipe-advisor {software.get('recipe-advisor', '?')}, torch {software.get('torch', '?')}"


def training_record(raw_config: dict, run_dir: Path, exit_code: int, *, gpus_per_node: int, nodes: int,
                    command: list[str]) -> RunRecord:
    outcome, detail = outcome_of(exit_code)
    software = software_here()
    provenance = {"engine": "bundled", "software": software, "release": _release(software), **labels()}
    reproduce = {"driver": driver_here(), "env": speed_env(), "command": shlex.join(command)[:4096]}
    text = yaml.safe_dump(raw_config, sort_keys=False)
    metrics = run_dir / METRICS_FILE
    common = dict(provenance=provenance, outcome=outcome, outcome_detail=detail,
                  reproduce={**reproduce, "log_path": str(metrics)})
    try:
        records = read_metrics(metrics, drop_torn_tail=outcome != "completed")
    except RunInputError:
        if outcome == "completed":
            raise
        records = []  # it ended before logging a step: the failure is the record
    if records:
        record = record_from_metrics(records, raw_config, gpus_per_node=gpus_per_node, nodes=nodes,
                                     config_text=text, **common)
    else:
        request, layout = request_and_layout(raw_config, gpus_per_node, nodes)
        record = RunRecord.model_validate({"request": request, "layout": layout, "config_text": text, **common})
    return prepared(record)


def record_training_run(raw_config: dict, run_dir: Path, exit_code: int, *, gpus_per_node: int, nodes: int,
                        command: list[str]) -> Optional[int]:
    """Store the run that just ended; prints where it went, or a warning. The stored id, or None."""
    if os.environ.get(RECORD_ENV, "1").strip().lower() in ("0", "false", "no"):
        return None
    from service.runs.store import RunsStore, StoreError

    try:
        record = training_record(raw_config, run_dir, exit_code, gpus_per_node=gpus_per_node, nodes=nodes,
                                 command=command)
        with RunsStore() as store:
            run_id, created = store.add(record)
            where = store.display_url
    except (RunInputError, StoreError, OSError) as exc:
        print(f"warning: the run was not recorded in the runs store: {exc}", file=sys.stderr)
        return None
    print(f"recorded run {run_id} ({record.outcome}) in the runs store {where}"
          + ("" if created else " (already there)"), file=sys.stderr)
    return run_id
