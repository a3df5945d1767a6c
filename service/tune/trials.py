"""The configs of a tune: each candidate's config as `recommend` would write it for that layout, and the trial
config that measures it (mock data, a fixed number of steps, no checkpoints, no validation)."""

from __future__ import annotations

from typing import Any, Optional

import yaml

from service.configs.yamlio import plain_copy
from service.recommend.config_build import build_config
from service.recommend.recommendation import Prepared, Recommendation, advise
from service.tune.candidates import Candidate
from trainer.contract.dotted import set_dotted

MOCK_DATASET = "trainer.data.MockDataset"


class CandidateConfig:
    """A candidate's config as `recommend` writes it for the layout, with its fast-path keys. The config is built
    at once (what a trial's store lookup hashes); validating it and rendering its commands (the recommendation)
    wait until a trial runs, a sweep is written or the winner is saved: a tune answered from the store needs
    neither."""

    def __init__(self, prepared: Prepared, candidate: Candidate, config_path: str = "config.yaml",
                 emit: str = "recipe-advisor"):
        self.prepared, self.candidate, self.config_path, self.emit = prepared, candidate, config_path, emit
        self._recommendation: Optional[Recommendation] = None
        if emit == "recipe-advisor":
            p = prepared
            _, config = build_config(p.card, p.goal, p.engine, p.recipe, candidate.row, p.request, list(p.overrides),
                                     list(p.notes), p.contract, base=p.base)
            self.config = self._with_fast_paths(config)
        else:  # another format: the recommendation makes it
            self.config = self._with_fast_paths(self.recommendation.config)

    def _with_fast_paths(self, config: dict) -> dict:
        if not self.candidate.fast_paths:
            return config
        config = plain_copy(config)
        for key, value in self.candidate.fast_paths:
            set_dotted(config, key, value)
        return config

    @property
    def recommendation(self) -> Recommendation:
        if self._recommendation is None:
            self._recommendation = advise(self.prepared, self.candidate.row, None, self.config_path, self.emit)
        return self._recommendation

    @property
    def text(self) -> str:
        """As `tune -o` writes it, before its measured header."""
        rec = self.recommendation
        return dump(self.config, _header(rec.config_yaml)) if self.candidate.fast_paths else rec.config_yaml

    @property
    def errors(self) -> list[str]:
        return [f"{f.code}: {f.message}" for f in self.recommendation.findings if f.severity == "error"]


def _header(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")][:1]


def dump(config: dict, header: list[str]) -> str:
    return "\n".join(header) + ("\n" if header else "") + yaml.safe_dump(config, sort_keys=False,
                                                                         default_flow_style=False)


def candidate_config(prepared: Prepared, candidate: Candidate, config_path: str = "config.yaml",
                     emit: str = "recipe-advisor") -> CandidateConfig:
    return CandidateConfig(prepared, candidate, config_path, emit)


def trial_config(config: dict, *, steps: int, warmup: int) -> dict:
    """The config that measures ``config``: ``warmup + steps`` steps each logged, mock data of the same shape,
    no checkpoint and no validation (neither is timed), the metrics in the trial's own folder (its cwd)."""
    trial: dict[str, Any] = plain_copy(config)
    total = warmup + steps
    scheduler = trial.setdefault("step_scheduler", {})
    scheduler.update(max_steps=total, log_interval=1, val_check_interval=total, checkpoint_interval=total)
    scheduler.pop("num_epochs", None)
    seq = (trial.get("dataset") or {}).get("seq_length")
    batch = scheduler.get("global_batch_size", 1)
    if (trial.get("dataset") or {}).get("_target_") != MOCK_DATASET:
        trial["dataset"] = {"_target_": MOCK_DATASET, "num_samples": batch * (total + 1), "seed": 1234,
                            **({"seq_length": seq} if seq else {})}
    trial.pop("validation_dataset", None)
    trial["checkpoint"] = {**(trial.get("checkpoint") or {}), "enabled": False, "checkpoint_dir": "."}
    trial.pop("restore_from", None)
    return trial
