"""Learning-rate schedule: linear warmup, then cosine / linear decay or constant.

For optimizer step ``s`` (1-based) and a param group whose configured lr is ``base``::

    s <= W:           lr = base * s / W                           (warmup; W = warmup_steps)
    p = clamp((s - W) / D, 0, 1)                                  (D = decay_steps)
    cosine:           lr = min + (base - min) * (1 + cos(pi p)) / 2
    linear:           lr = min + (base - min) * (1 - p)
    constant:         lr = base

This is Megatron's OptimizerParamScheduler shape (warmup then decay to
``min_lr``), except that warmup starts at ``base / W`` rather than at 0, so no
step is wasted at lr 0 (torchtitan does the same). ``decay_steps`` defaults to
the steps left after warmup.

Only the step count is checkpointed; the shape comes from the config, so a
resumed run follows the schedule its config describes.
"""

from __future__ import annotations

import math
from typing import Any

SCHEDULES = ("cosine", "linear", "constant")


def lr_at(step: int, base_lr: float, *, schedule: str, warmup_steps: int, decay_steps: int,
          min_lr: float) -> float:
    """The formula above, for one param group (``step`` is 1-based)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"lr_scheduler.schedule: {schedule!r} is not one of {', '.join(SCHEDULES)}")
    if warmup_steps > 0 and step <= warmup_steps:
        return base_lr * step / warmup_steps
    if schedule == "constant":
        return base_lr
    progress = min(max((step - warmup_steps) / max(decay_steps, 1), 0.0), 1.0)
    if schedule == "cosine":
        factor = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        factor = 1.0 - progress
    return min_lr + (base_lr - min_lr) * factor


class WarmupDecayLR:
    """Sets each param group's lr before every optimizer step; ``step()`` after ``optimizer.step()``."""

    def __init__(self, optimizer, *, schedule: str = "cosine", warmup_steps: int = 0,
                 decay_steps: int = 1, min_lr: float = 0.0):
        self.optimizer = optimizer
        self.schedule = schedule
        self.warmup_steps = int(warmup_steps)
        self.decay_steps = int(decay_steps)
        self.min_lr = float(min_lr)
        self.base_lrs = [float(g.setdefault("initial_lr", g["lr"])) for g in optimizer.param_groups]
        self.steps_done = 0
        self._apply()

    def _apply(self) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = lr_at(self.steps_done + 1, base, schedule=self.schedule,
                                warmup_steps=self.warmup_steps, decay_steps=self.decay_steps,
                                min_lr=self.min_lr)

    def step(self) -> None:
        self.steps_done += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        """The lr each group will use at the next optimizer step."""
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps_done = int(state["steps_done"])
        self._apply()


def build_lr_scheduler(optimizer, section, total_steps: int) -> WarmupDecayLR:
    """From config ``lr_scheduler`` (trainer.contract.config.LRSchedulerSection) and the run's total steps."""
    warmup = section.warmup_steps
    decay = section.decay_steps or max(total_steps - warmup, 1)
    return WarmupDecayLR(optimizer, schedule=section.schedule, warmup_steps=warmup,
                         decay_steps=decay, min_lr=section.min_lr)
