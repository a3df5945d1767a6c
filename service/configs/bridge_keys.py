"""What the index knows, and does not know, about the values Megatron Bridge runs.

Shared by service.configs.changes (`diff`, recommend's change list) and service.recommend.bridge_command (the Bridge
command); it imports nothing, so both can use it without an import cycle.
"""

from __future__ import annotations

# Keys the index does not record for a Bridge recipe (Megatron Bridge's recipe records have no field
# for them): where a config leaves one out, Bridge runs its recipe's value (warmup 2000 in the Llama 3
# H100 recipes, 500 in _pretrain_common, 50 in _sft_common; seed 1234 or 5678), not our schema default.
UNRECORDED = frozenset({
    "optimizer.weight_decay", "optimizer.betas", "lr_scheduler.schedule", "lr_scheduler.warmup_steps",
    "lr_scheduler.decay_steps", "lr_scheduler.min_lr", "clip_grad_norm.max_norm", "rng.seed",
})
# How a change shows the value Bridge runs for an UNRECORDED key a config leaves out: known to Bridge's
# recipe function, not to the index.
BRIDGE_RECIPE_VALUE = "<Bridge recipe value>"

# Correctness checks that are off where a config leaves them out, by their Megatron / Bridge key name
# (the last part of a dotted key): Megatron-Core DistributedDataParallelConfig (check_for_nan_in_grad,
# check_for_large_grads: False), Bridge RerunStateMachineConfig (check_for_spiky_loss: False) and
# TrainingConfig (check_weight_hash_across_dp_replicas_interval: None, no check). Our configs spell
# the DDP one distributed.check_for_nan_in_grad. Checks that default to on (check_for_nan_in_loss) are
# left out on purpose: their default has moved between Bridge versions, so dropping one stays "left to
# an unknown default".
CHECK_DEFAULTS = {
    "check_for_nan_in_grad": False,
    "check_for_large_grads": False,
    "check_for_spiky_loss": False,
    "check_weight_hash_across_dp_replicas_interval": None,
}
