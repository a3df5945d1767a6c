"""The tune loop: measure the candidates in order, record each trial, stop early, keep the fastest.

Each trial is looked up in the runs store first (the same trial config, hence the same layout, steps and
warm-up, and the same software): one stored is reused, not run again, so an interrupted tune resumes where it
stopped and a repeated one answers from the store. Otherwise its trial config is written to its own folder and
run (``service.tune.runner``); the outcome is read from its exit code and log (``service.tune.outcome``) and the
trial is stored, measured or not, before the next one starts.

The order: the recommended layout and one layout per parallel shape first, as the candidates list them; then,
trial by trial, the variant the estimate corrected by this tune's measurements puts fastest
(``service.tune.order``), so the variants of the shape measured fastest are refined first, not those of the
shape estimated fastest.

Early stop (DeepSpeed Autotuning's rule, with a threshold): after ``patience`` variant trials in a row none of which
beat the best measured so far by more than ``min_gain``, or when the budget is spent. The first pass, one trial per
parallel shape, is not cut short.
"""

from __future__ import annotations

import shlex
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import yaml

from service.recommend.recommendation import Prepared
from service.runs.bundled import read_metrics, request_and_layout
from service.runs.errors import RunInputError
from service.runs.ingest import driver_here, labels, software_here, speed_env
from service.runs.ingest import prepared as prepared_record
from service.runs.measure import percentile
from service.runs.schema import RunRecord, config_hash
from service.tune.candidates import RECOMMENDED, SHAPE, Candidate, Candidates
from service.tune.order import next_variant
from service.tune.outcome import Ending, classify
from service.tune.runner import Runner, TrialRun, TrialSpec, run_trial
from service.tune.trials import CandidateConfig, candidate_config, dump, trial_config

TRIAL_CONFIG = "trial.yaml"
RECORD_ENV = {"RECIPE_ADVISOR_RECORD_RUNS": "0"}  # tune records its trials itself, with their outcome


@dataclass
class TuneOptions:
    trials: int = 8
    steps: int = 30
    warmup: int = 5
    trial_timeout_s: float = 300.0
    budget_s: Optional[float] = None
    patience: int = 3
    min_gain: float = 0.02
    workdir: Path = Path("tune-trials")
    memory_cap_bytes: Optional[int] = None


@dataclass
class TrialResult:
    index: int
    candidate: Candidate
    config: CandidateConfig
    ending: Ending
    measurement: dict = field(default_factory=dict)
    first_step_s: Optional[float] = None  # launch to the first timed step (after the warm-up)
    wall_s: Optional[float] = None
    log_path: Optional[str] = None
    run_id: Optional[int] = None
    from_store: bool = False

    @property
    def measured(self) -> Optional[float]:
        return self.measurement.get("tokens_per_s_per_gpu") if self.ending.outcome == "completed" else None


@dataclass
class TuneResult:
    candidates: Candidates
    results: list[TrialResult]
    stop_reason: str
    wall_s: float

    @property
    def measured(self) -> list[TrialResult]:
        return sorted((r for r in self.results if r.measured), key=lambda r: -r.measured)

    @property
    def best(self) -> Optional[TrialResult]:
        measured = self.measured
        return measured[0] if measured else None

    @property
    def first_choice(self) -> Optional[TrialResult]:
        return next((r for r in self.results if r.candidate is self.candidates.first_choice), None)


def timed_steps(records: list[dict], warmup: int, tokens_per_step: int) -> dict:
    """Step-time summary of the records after the first ``warmup`` steps (each record one logged step)."""
    kept = [r for r in records if r["step"] > warmup]
    times = [tokens_per_step / r["tps"] for r in kept]
    if not times:
        return {"timed_steps": 0}
    mems = [r["mem"] for r in records if r.get("mem") is not None]
    losses = [r["loss"] for r in records if isinstance(r.get("loss"), float)]
    return {"timed_steps": len(times), "step_time_s": statistics.median(times),
            "step_time_p10_s": percentile(times, 0.1), "step_time_p90_s": percentile(times, 0.9),
            "peak_mem_gib": max(mems) if mems else None,
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}


def trial_text(cfg: CandidateConfig, steps: int, warmup: int) -> str:
    """The trial config of a candidate, as written to its folder and hashed to find it in the store."""
    return dump(trial_config(cfg.config, steps=steps, warmup=warmup),
                [f"# tune trial of {cfg.candidate.label}: {warmup} warm-up + {steps} timed steps"])


def stored_trial(store, text: str, software: dict) -> Optional[RunRecord]:
    """The stored trial of this trial config run with this software, if any (the newest)."""
    if store is None:
        return None
    for record in store.query(config_hash=config_hash(text), engine="bundled"):
        if record.provenance.software == software:
            return record
    return None


class Tuner:
    """One tune of one prepared request (see module docstring). ``runner`` runs a trial (tests inject one);
    ``store`` is a RunsStore or None (nothing reused, nothing recorded); ``progress`` gets one line per event."""

    def __init__(self, prepared: Prepared, candidates: Candidates, options: TuneOptions, *,
                 runner: Runner = run_trial, store=None, progress: Callable[[str], None] = lambda line: None,
                 clock: Callable[[], float] = time.monotonic):
        self.prepared, self.candidates, self.options = prepared, candidates, options
        self.runner, self.store, self.progress, self.clock = runner, store, progress, clock
        self.software = software_here()
        self.request = prepared.request

    # ---- one trial
    def _tokens_per_step(self) -> int:
        return self.request.global_batch_size * self.request.seq_length

    def _trial_text(self, cfg: CandidateConfig) -> str:
        return trial_text(cfg, self.options.steps, self.options.warmup)

    def _stored(self, text: str) -> Optional[RunRecord]:
        return stored_trial(self.store, text, self.software)

    def _record(self, result: TrialResult, text: str, command: list[str]) -> Optional[int]:
        if self.store is None:
            return None
        raw = yaml.safe_load(text)
        req = self.request
        request, layout = request_and_layout(raw, req.gpus_per_node, req.num_nodes)
        request["model"], request["gpu_type"] = req.model.id, req.hardware.name
        estimate = result.candidate.estimated_tokens_per_s_per_gpu
        measurement = {k: v for k, v in result.measurement.items() if v is not None}
        measurement.update(estimate_tokens_per_s_per_gpu=estimate,
                           estimate_step_time_s=self._tokens_per_step() / estimate / req.world_size)
        if result.ending.outcome == "completed":
            measurement["tokens_per_s_per_gpu"] = result.measured
        else:
            measurement = {k: v for k, v in measurement.items() if k.startswith("estimate")}
        software = self.software
        record = RunRecord.model_validate({
            "provenance": {"engine": "bundled", "software": software, "hosts": req.num_nodes,
                           "release": f"recipe-advisor {software.get('recipe-advisor', '?')}, "
                                      f"torch {software.get('torch', '?')}", **labels()},
            "request": request, "layout": layout, "config_text": text, "measurement": measurement,
            "outcome": result.ending.outcome, "outcome_detail": result.ending.detail,
            "reproduce": {"driver": driver_here(), "env": speed_env(), "command": shlex.join(command)[:4096],
                          "log_path": result.log_path}})
        run_id, _ = self.store.add(prepared_record(record))
        return run_id

    def _from_store(self, index: int, cfg: CandidateConfig, record: RunRecord) -> TrialResult:
        m = record.measurement.model_dump()
        return TrialResult(index, cfg.candidate, cfg, Ending(record.outcome, record.outcome_detail), m,
                           log_path=record.reproduce.log_path, run_id=record.id, from_store=True)

    def _run(self, index: int, cfg: CandidateConfig, text: str, timeout_s: float) -> TrialResult:
        folder = (self.options.workdir / f"trial-{index:02d}").resolve()
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / TRIAL_CONFIG).write_text(text, encoding="utf-8")
        spec = TrialSpec(config=folder / TRIAL_CONFIG, folder=folder, nproc_per_node=self.request.gpus_per_node,
                         timeout_s=timeout_s, memory_cap_bytes=self.options.memory_cap_bytes, env=dict(RECORD_ENV),
                         warmup=self.options.warmup)
        run: TrialRun = self.runner(spec)
        records = []
        if spec.metrics_path.is_file():
            try:
                records = read_metrics(spec.metrics_path, drop_torn_tail=True)
            except RunInputError:
                records = []
        measurement = timed_steps(records, self.options.warmup, self._tokens_per_step())
        if measurement.get("step_time_s"):
            measurement["tokens_per_s_per_gpu"] = (self._tokens_per_step() / measurement["step_time_s"]
                                                   / self.request.world_size)
        ending = classify(run.exit_code, run.log, timed_out=run.timed_out, timeout_s=timeout_s,
                          measured=bool(measurement.get("step_time_s")))
        result = TrialResult(index, cfg.candidate, cfg, ending, measurement, run.first_timed_step_s, run.wall_s,
                             str(spec.log_path))
        result.run_id = self._record(result, text, run.command)
        return result

    def _refused(self, index: int, cfg: CandidateConfig, text: str) -> TrialResult:
        result = TrialResult(index, cfg.candidate, cfg, Ending("refused", "; ".join(cfg.errors)[:400]))
        result.run_id = self._record(result, text, [])
        return result

    # ---- the loop
    def _time_left(self, start: float, results: list[TrialResult], remaining: int) -> tuple[Optional[float], str]:
        """Seconds left: of the budget when there is one, else the trials to come at the pace of those run."""
        elapsed = self.clock() - start
        if self.options.budget_s is not None:
            left = max(self.options.budget_s - elapsed, 0.0)
            return left, f"{left / 60:.1f} min of the budget left"
        walls = [r.wall_s for r in results if r.wall_s]
        if not walls:
            return None, ""
        return None, f"~{statistics.mean(walls) * remaining / 60:.1f} min left"

    def _line(self, index: int, total: int, cfg: CandidateConfig, best: Optional[TrialResult], left_text: str,
              action: str) -> str:
        best_text = (f"best {best.measured:,.0f} tok/s/GPU ({best.candidate.label})" if best else "best -")
        return " | ".join(part for part in (f"trial {index}/{total} {action} {cfg.candidate.label}", best_text,
                                            left_text) if part)

    def run(self) -> TuneResult:
        opts = self.options
        start = self.clock()
        results: list[TrialResult] = []
        best: Optional[TrialResult] = None
        without_gain = 0
        total = min(opts.trials, len(self.candidates.trials))
        stop = f"all {total} trials done"
        first_pass = [c for c in self.candidates.trials if c.kind in (RECOMMENDED, SHAPE)]
        variants = [c for c in self.candidates.trials if c.kind not in (RECOMMENDED, SHAPE)]
        for index in range(1, total + 1):
            if first_pass:
                candidate = first_pass.pop(0)
            else:
                candidate = next_variant(variants, [(r.candidate, r.measured) for r in results if r.measured])
                variants.remove(candidate)
            cfg = candidate_config(self.prepared, candidate)
            text = self._trial_text(cfg)
            stored = self._stored(text)
            left, left_text = self._time_left(start, results, total - index + 1)
            if stored is not None:
                result = self._from_store(index, cfg, stored)
                self.progress(self._line(index, total, cfg, best, left_text, "from the store:"))
            elif cfg.errors:
                result = self._refused(index, cfg, text)
            else:
                if left is not None and left <= 0:
                    stop = f"budget of {opts.budget_s / 60:g} min spent after {index - 1} trials"
                    break
                self.progress(self._line(index, total, cfg, best, left_text, "running"))
                timeout = opts.trial_timeout_s if left is None else min(opts.trial_timeout_s, left)
                result = self._run(index, cfg, text, timeout)
            results.append(result)
            bar = 0.0 if best is None else best.measured * (1 + opts.min_gain)
            gained = result.measured is not None and result.measured > bar
            if result.measured is not None and (best is None or result.measured > best.measured):
                best = result
            # Every parallel shape is measured before the early stop may end the tune: on a new machine a shape
            # the estimate puts last can be the fastest, and the shapes are few; the stop refines among variants.
            coarse = result.candidate.kind in (RECOMMENDED, SHAPE)
            without_gain = 0 if gained or coarse else without_gain + 1
            if without_gain >= opts.patience and index < total:
                stop = (f"stopped early: {opts.patience} trials in a row none faster than the best by more than "
                        f"{opts.min_gain:.0%}")
                break
        return TuneResult(self.candidates, results, stop, self.clock() - start)
