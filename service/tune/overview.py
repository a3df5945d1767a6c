"""A request's tune as the web page shows it: every trial the runs store holds for it, sorted by measurement beside
its estimate (failures with their reason), the estimate's pair order on them, and the sweep a user would run
(`tune --emit-sweep`, in the engine and format asked) with its scripts. It reads; it never starts a trial.

A trial is found in the store as the command that recorded it keys it:

- a trial `tune` ran here (bundled engine): its trial config and this machine's software, as `tune` resumes;
- a trial of a bundled or NeMo AutoModel sweep that `tune --collect` read back: its ``trial.yaml``, the config
  the sweep wrote (hashed as the store hashes every config);
- a trial of a Megatron Bridge sweep (its log is read without a config): the request, the trial's log in the
  sweep (``trial-NN/megatron.log``) and, for a completed run, the layout the log states (parallel sizes, micro
  batch, recompute); a failed trial's log may state no layout.
"""

from __future__ import annotations

from typing import Optional

from service.runs.advice import plan_request_key, row_key
from service.runs.ingest import software_here
from service.runs.keys import layout_text
from service.runs.schema import RunRecord, config_hash
from service.tune.candidates import Candidate, Candidates
from service.tune.report import pair_order
from service.tune.search import stored_trial, trial_text
from service.tune.sweep import (
    LOGS,
    SweepTrial,
    commands_script,
    manifest_entry,
    run_script,
    sbatch_script,
    sweep_trials,
    trial_folder,
)
from service.tune.trials import candidate_config
from service.tune.view import tune_commands

SWEEP_FOLDER = "tune-sweep"


def sweep_engine(prepared, emit: str) -> str:
    """The engine a sweep's trials run with: NeMo AutoModel for ``--emit automodel``, else the request's."""
    return "automodel" if emit == "automodel" else prepared.engine


def stored_sweep_trial(store, prepared, trial: SweepTrial, engine: str) -> Optional[RunRecord]:
    """The newest record `tune --collect` made of this sweep trial, if any (module docstring)."""
    if engine != "megatron":
        found = store.query(config_hash=config_hash(trial.config_text), engine=engine, limit=1)
        return found[0] if found else None
    log = f"/{trial_folder(trial)}/{LOGS[engine]}"
    for record in store.query(request_key=plan_request_key(prepared.result.request), engine="megatron"):
        if (record.reproduce.log_path or "").replace("\\", "/").endswith(log) and (
                record.outcome != "completed" or _same_layout(record, trial.candidate)):
            return record
    return None


def _same_layout(record: RunRecord, candidate: Candidate) -> bool:
    """The parallel sizes, micro batch and recompute (a log tells the sharding less surely: the distributed
    optimizer and Megatron-FSDP are told by different arguments across versions)."""
    row = candidate.row
    sizes = layout_text(record).rsplit(",", 1)[0]
    return sizes == ",".join(map(str, row_key(row)[:-1])) and record.layout.recompute == row.recompute


def _row(index: int, candidate: Candidate) -> dict:
    return {"index": index, "layout": candidate.label, "kind": candidate.kind, "why": candidate.why,
            "estimate": candidate.estimated_tokens_per_s_per_gpu, "measured": None, "ratio": None,
            "outcome": None, "detail": None, "run_id": None, "via": None}


def _with_record(row: dict, record: RunRecord, via: str) -> None:
    measured = record.measured_tokens_per_s_per_gpu if record.outcome == "completed" else None
    row.update(measured=measured, ratio=measured / row["estimate"] if measured and row["estimate"] else None,
               outcome=record.outcome, detail=record.outcome_detail, run_id=record.id, via=via)


def _by_measurement(rows: list[dict]) -> list[dict]:
    """Measured first (fastest first), then the failed (tune order), then those not run yet (tune order)."""
    return sorted(rows, key=lambda r: (0, -r["measured"], 0) if r["measured"] else
                  (1 if r["outcome"] else 2, 0, r["index"]))


def versus_first_choice(rows: list[dict]) -> Optional[str]:
    """How the fastest measured trial compares with the estimate's first choice (tune's trial 1)."""
    measured = [r for r in rows if r["measured"]]
    first = next((r for r in rows if r["index"] == 1), None)
    if not measured or first is None:
        return None
    best = max(measured, key=lambda r: r["measured"])
    if best is first:
        return "the estimate's first choice was the fastest measured"
    if first["measured"] is None:
        state = first["outcome"].replace("_", " ") if first["outcome"] else "is not measured yet"
        return f"the estimate's first choice ({first['layout']}) {state}"
    return (f"{best['measured'] / first['measured'] - 1:.1%} faster than the estimate's first choice "
            f"({first['layout']}, {first['measured']:,.0f})")


def _sweep(prepared, trials: list[SweepTrial], engine: str) -> dict:
    entries = [manifest_entry(t, engine) for t in trials]
    return {"engine": engine, "folder": SWEEP_FOLDER, "log": LOGS[engine],
            "trials": [{**entry, "run_sh": run_script(prepared, t), "trial_yaml": t.config_text}
                       for entry, t in zip(entries, trials)],
            "commands_sh": commands_script(entries), "sbatch": sbatch_script(prepared, len(entries))}


def tune_overview(prepared, advice, candidates: Candidates, *, emit: str, trials: int, steps: int, warmup: int,
                  store=None) -> dict:
    """The page's tune (module docstring): ``trials`` sorted by measurement, the sweep, the commands."""
    engine = sweep_engine(prepared, emit)
    order = {c.label: i for i, c in enumerate(candidates.trials, 1)}
    rows = {c.label: _row(order[c.label], c) for c in candidates.trials[:trials]}
    software = software_here() if store is not None and prepared.engine == "bundled" else None
    for candidate in candidates.trials[:trials] if software is not None else []:
        text = trial_text(candidate_config(prepared, candidate), steps, warmup)
        record = stored_trial(store, text, software)
        if record is not None:
            _with_record(rows[candidate.label], record, "tune")
    sweep, engine_skips = sweep_trials(prepared, candidates, engine, trials=trials, steps=steps, warmup=warmup)
    for trial in sweep:
        row = rows.setdefault(trial.candidate.label, _row(order[trial.candidate.label], trial.candidate))
        record = None if store is None or row["outcome"] else stored_sweep_trial(store, prepared, trial, engine)
        if record is not None:
            _with_record(row, record, "sweep")
    ordered = _by_measurement(list(rows.values()))
    agree, pairs = pair_order([(r["estimate"], r["measured"]) for r in ordered if r["measured"]])
    return {"engine": engine, "emit": emit, "trials": ordered, "measured": sum(bool(r["measured"]) for r in ordered),
            "failed": sum(bool(r["outcome"]) and not r["measured"] for r in ordered),
            "versus_first_choice": versus_first_choice(ordered), "pair_agreement": {"agree": agree, "pairs": pairs},
            "skipped": [s.to_dict() for s in engine_skips + candidates.skipped],
            "sweep": _sweep(prepared, sweep, engine),
            "commands": tune_commands(prepared, advice, trials=trials, steps=steps, warmup=warmup, emit=emit)}
