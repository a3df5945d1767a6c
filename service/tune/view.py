"""What the service shows of a tune: the trials a request's tune would run, each with what the runs store holds
for it, and the commands that run the tune (here, or as a sweep on a cluster). The service never starts one."""

from __future__ import annotations

import shlex
from typing import Optional

from service.runs.ingest import software_here
from service.tune.candidates import Candidates
from service.tune.search import stored_trial, trial_text
from service.tune.trials import candidate_config


def request_flags(prepared, advice) -> list[str]:
    req = prepared.request
    flags = ["--model", req.model.id, "--gpus", str(advice.gpus), "--gpu-type", req.hardware.name,
             "--goal", prepared.goal, "--engine", prepared.engine]
    flags += ["--nodes", str(advice.nodes)] if advice.nodes else []
    flags += ["--seq-length", str(advice.seq_length)] if advice.seq_length else []
    flags += ["--global-batch-size", str(advice.global_batch_size)] if advice.global_batch_size else []
    flags += ["--precision", advice.precision] if advice.precision else []
    return flags


def tune_commands(prepared, advice, *, trials: int, steps: int, warmup: int, emit: str = "recipe-advisor"
                  ) -> dict[str, str]:
    """The commands of the tune: write its sweep, read the sweep back and (bundled engine) run it here."""
    flags = request_flags(prepared, advice) + ["--trials", str(trials), "--steps", str(steps), "--warmup", str(warmup)]
    flags += ["--emit", emit] if emit != "recipe-advisor" else []
    command = shlex.join(["recipe-advisor", "tune", *flags])
    commands = {"sweep": f"{command} --emit-sweep tune-sweep", "collect": f"{command} --collect tune-sweep"}
    if prepared.engine == "bundled" and emit == "recipe-advisor":
        commands["here"] = f"{command} -o best.yaml"
    return commands


def tune_view(prepared, advice, candidates: Candidates, *, trials: int, steps: int, warmup: int,
              store=None) -> dict:
    """The first ``trials`` candidates with their estimates and, where the store holds the same trial (same trial
    config and software), its outcome and measurement; the skipped layouts; the commands."""
    software = software_here()
    rows = []
    for index, candidate in enumerate(candidates.trials[:trials], 1):
        measured: Optional[float] = None
        outcome = detail = None
        if prepared.engine == "bundled" and store is not None:
            record = stored_trial(store, trial_text(candidate_config(prepared, candidate), steps, warmup), software)
            if record is not None:
                outcome, detail = record.outcome, record.outcome_detail
                measured = record.measured_tokens_per_s_per_gpu if outcome == "completed" else None
        rows.append({"index": index, "layout": candidate.label, "kind": candidate.kind, "why": candidate.why,
                     "estimate_tokens_per_s_per_gpu": round(candidate.estimated_tokens_per_s_per_gpu, 1),
                     "measured_tokens_per_s_per_gpu": None if measured is None else round(measured, 1),
                     "outcome": outcome, "detail": detail})
    commands = tune_commands(prepared, advice, trials=trials, steps=steps, warmup=warmup)
    measured_rows = [r for r in rows if r["measured_tokens_per_s_per_gpu"]]
    best = max(measured_rows, key=lambda r: r["measured_tokens_per_s_per_gpu"]) if measured_rows else None
    return {"trials": rows, "best_measured": best, "measured": len(measured_rows),
            "skipped": [s.to_dict() for s in candidates.skipped], "commands": commands}
