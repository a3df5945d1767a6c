"""A prepared tiny-llama request and a trial runner that fakes the trainer's metrics from a speed table."""

import json

import pytest
import yaml

from service.recommend.layout_source import choose_layout
from service.recommend.recommendation import prepare
from service.request import advice_request
from service.tune.candidates import select_candidates
from service.tune.runner import TrialRun


def tuned_request(model="tiny-llama", **fields):
    prepared = prepare(advice_request(model, 2, "cpu", goal="pretrain", engine="bundled", **fields), read_runs=False)
    first, source = choose_layout(prepared.result, prepared.recipe, prepared.given)
    return prepared, select_candidates(prepared.result, first, source.summary, compiled=False)


@pytest.fixture(scope="session")
def tiny_llama():
    return tuned_request()


def layout_of(config: dict) -> tuple:
    dist = config.get("distributed", {})
    return (dist.get("tp_size", 1), dist.get("pp_size", 1), config["step_scheduler"]["local_batch_size"],
            dist.get("activation_checkpointing", "none"), dist.get("strategy", "fsdp2"))


class FakeTrainer:
    """Writes training.jsonl as the trainer would, at the tokens/s ``speed(layout)`` gives; records each call."""

    def __init__(self, speed, fail=None):
        self.speed, self.fail, self.calls = speed, fail or (lambda layout: None), []

    def __call__(self, spec):
        config = yaml.safe_load(spec.config.read_text())
        layout = layout_of(config)
        self.calls.append(layout)
        failure = self.fail(layout)
        if failure is not None:
            return failure(spec)
        steps = config["step_scheduler"]["max_steps"]
        with open(spec.metrics_path, "w") as fh:
            for step in range(1, steps + 1):
                tps = self.speed(layout) * (0.3 if step == 1 else 1.0)  # a slow first step: the warm-up
                fh.write(json.dumps({"step": step, "epoch": 0, "loss": 6.0 - 0.01 * step, "grad_norm": 1.0,
                                     "lr": 1e-3, "mem": 0.3, "tps": tps, "mfu": None}) + "\n")
        return TrialRun(exit_code=0, timed_out=False, log="", wall_s=1.0, first_step_s=0.5, command=["fake"],
                        first_timed_step_s=0.6)
