"""Step scheduler: turns a per-rank stream of local batches into optimizer steps.

One optimizer step consumes the *global batch*: ``global_batch_size`` samples
over all data-parallel ranks, i.e. ``grad_acc_steps = global / (local x DP)``
micro-batches on each rank. Gradient accumulation is derived, never configured;
a global batch that this does not divide is a config error.

It also says when to log, validate and checkpoint, and it is stateful (step,
epoch) so a resumed run continues the same count.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from trainer.contract.overrides import ConfigError


def derive_grad_acc_steps(global_batch_size: int, local_batch_size: int, dp_size: int) -> int:
    """``global / (local x DP)``; a ConfigError naming the keys when it is not a whole number."""
    per_step = local_batch_size * dp_size
    if global_batch_size % per_step:
        options = [d for d in range(1, global_batch_size + 1) if global_batch_size % (d * dp_size) == 0]
        problem = (f"step_scheduler.local_batch_size: global_batch_size {global_batch_size} is not divisible by "
                   f"local_batch_size {local_batch_size} x data-parallel size {dp_size} = {per_step}; "
                   "gradient accumulation must be a whole number.")
        if options:
            raise ConfigError(f"{problem} Use a local_batch_size in {options[:8]} or a global_batch_size that is "
                              f"a multiple of {per_step}")
        # No local batch helps: the data-parallel size itself does not divide the global batch.
        sizes = [d for d in range(1, global_batch_size + 1) if global_batch_size % d == 0][:8]
        raise ConfigError(f"{problem} No local_batch_size fixes it: use a global_batch_size that is a multiple of "
                          f"{per_step}, or a data-parallel size (processes / distributed.tp_size) that divides "
                          f"{global_batch_size}, such as {', '.join(map(str, sizes))}")
    return global_batch_size // per_step


def too_little_data(dataloader, global_batch_size: int, local_batch_size: int, dp_size: int) -> str:
    """Why the data gives no optimizer step: the dataset's samples (after packing, when its
    ``sample_unit`` says so), and how many of them the ranks' whole local batches use."""
    usable = len(dataloader) * local_batch_size * dp_size
    dataset = getattr(dataloader, "dataset", None)
    total = len(dataset) if dataset is not None else usable
    unit = getattr(dataset, "sample_unit", None)
    samples = f"{total} samples" + (f" ({unit})" if unit else "")
    fix = f"add samples (at least {global_batch_size}) or lower step_scheduler.global_batch_size"
    if usable == total:
        return f"dataset: {samples} are fewer than one global batch of {global_batch_size}; {fix}"
    split = (f"each of the {dp_size} data-parallel ranks gets {total // dp_size} and uses" if dp_size > 1
             else "training uses")
    return (f"dataset: {samples}, of which {usable} usable ({split} only whole local batches of "
            f"{local_batch_size}), are fewer than one global batch of {global_batch_size}; {fix}")


def steps_per_epoch(num_samples: int, global_batch_size: int, local_batch_size: int, dp_size: int) -> int:
    """Optimizer steps one pass over ``num_samples`` gives: each data-parallel rank takes an equal share
    in whole local batches (ResumableDataLoader), and a partial accumulation group is dropped."""
    return (num_samples // dp_size // local_batch_size) // derive_grad_acc_steps(global_batch_size, local_batch_size,
                                                                                dp_size)


def run_length(max_steps: Optional[int], num_epochs: int, steps_per_epoch: int) -> int:
    """Optimizer steps of a run: max_steps when set, capped by the epochs (the LR schedule's length
    unless lr_scheduler.decay_steps fixes it; the resume check compares it too)."""
    epoch_steps = num_epochs * steps_per_epoch
    return min(max_steps, epoch_steps) if max_steps else epoch_steps


class StepScheduler:
    """Iterate ``for epoch in sched.epochs: for micro_batches in sched: ...``.

    Each item is the list of ``grad_acc_steps`` local batches of one optimizer step;
    a partial group at the end of an epoch is dropped. Training ends after
    ``total_steps`` = min(max_steps, num_epochs x steps_per_epoch).
    """

    def __init__(self, dataloader, *, global_batch_size: int, local_batch_size: int, dp_size: int,
                 max_steps: Optional[int] = None, num_epochs: int = 1, val_check_interval: Optional[int] = None,
                 checkpoint_interval: Optional[int] = None, log_interval: int = 1):
        self.dataloader = dataloader
        self.global_batch_size = global_batch_size
        self.local_batch_size = local_batch_size
        self.grad_acc_steps = derive_grad_acc_steps(global_batch_size, local_batch_size, dp_size)
        self.steps_per_epoch = len(dataloader) // self.grad_acc_steps
        if self.steps_per_epoch == 0:
            raise ConfigError(too_little_data(dataloader, global_batch_size, local_batch_size, dp_size))
        self.max_steps = max_steps
        self.total_steps = run_length(max_steps, num_epochs, self.steps_per_epoch)
        self.num_epochs = num_epochs
        self.val_check_interval = val_check_interval
        self.checkpoint_interval = checkpoint_interval
        self.log_interval = log_interval
        self.step = 0
        self.epoch = 0

    def length_warnings(self, warmup_steps: int) -> list[str]:
        """What the run's length does that its config does not show: the data ending it before
        max_steps, and an LR warmup longer than the run."""
        warnings = []
        if self.max_steps and self.total_steps < self.max_steps:
            warnings.append(f"the data ends the run after {self.total_steps} steps ({self.num_epochs} epoch(s) of "
                            f"{self.steps_per_epoch}), before step_scheduler.max_steps {self.max_steps}; raise "
                            "step_scheduler.num_epochs or add data")
        if warmup_steps > self.total_steps:
            warnings.append(f"lr_scheduler.warmup_steps {warmup_steps} is longer than the run ({self.total_steps} "
                            "steps): the learning rate never reaches optimizer.lr")
        return warnings

    @property
    def epochs(self) -> Iterator[int]:
        while self.epoch < self.num_epochs and not self.done:
            self.dataloader.set_epoch(self.epoch)
            yield self.epoch
            if not self.done:
                self.epoch += 1

    def __iter__(self) -> Iterator[list[Any]]:
        group: list[Any] = []
        for batch in self.dataloader:
            group.append(batch)
            if len(group) == self.grad_acc_steps:
                self.step += 1
                yield group
                group = []
                if self.done:
                    return

    @property
    def done(self) -> bool:
        return self.step >= self.total_steps

    @property
    def is_last_step(self) -> bool:
        return self.step == self.total_steps

    @property
    def is_log_step(self) -> bool:
        return self.step % self.log_interval == 0 or self.is_last_step

    @property
    def is_val_step(self) -> bool:
        return bool(self.val_check_interval) and (self.step % self.val_check_interval == 0 or self.is_last_step)

    @property
    def is_ckpt_step(self) -> bool:
        return bool(self.checkpoint_interval) and self.step % self.checkpoint_interval == 0 or self.is_last_step

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step, self.epoch = int(state["step"]), int(state["epoch"])
