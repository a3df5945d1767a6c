"""The configs of a tune: each candidate's config as `recommend` would write it for that layout, and the trial
config that measures it (mock data, a fixed number of steps, no checkpoints, no validation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from service.recommend.recommendation import Prepared, Recommendation, advise
from service.tune.candidates import Candidate
from trainer.contract.dotted import set_dotted

MOCK_DATASET = "trainer.data.MockDataset"


@dataclass(frozen=True)
class CandidateConfig:
    candidate: Candidate
    recommendation: Recommendation
    config: dict  # the candidate's config (the recommendation's, with its fast-path keys)
    text: str  # as `tune -o` writes it, before its measured header

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
    rec = advise(prepared, candidate.row, None, config_path, emit)
    if not candidate.fast_paths:
        return CandidateConfig(candidate, rec, rec.config, rec.config_yaml)
    config = yaml.safe_load(yaml.safe_dump(rec.config))
    for key, value in candidate.fast_paths:
        set_dotted(config, key, value)
    return CandidateConfig(candidate, rec, config, dump(config, _header(rec.config_yaml)))


def trial_config(config: dict, *, steps: int, warmup: int) -> dict:
    """The config that measures ``config``: ``warmup + steps`` steps each logged, mock data of the same shape,
    no checkpoint and no validation (neither is timed), the metrics in the trial's own folder (its cwd)."""
    trial: dict[str, Any] = yaml.safe_load(yaml.safe_dump(config))
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
