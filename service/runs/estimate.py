"""The planner's estimate of a stored run: the same step-time model, request and layout, term by term.

Calibration fits its correction on these terms, and a way in stores the estimate beside what the run measured
(``measurement.estimate_*``). Requests are cached: the runs of one request share one model.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from recipe_index.errors import UnknownHardwareError, UnknownModelError
from service.estimate.steptime import StepTime
from service.facts import Layout
from service.plan.planner import make_request
from service.plan.types import Estimators, PlanError
from service.runs.keys import PLANNER_ENGINE
from service.runs.schema import RunRecord
from service.validate.rules.precision import PRECISION_CHOICES

TERMS = ("compute_s", "bubble_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "optimizer_s",
         "moe_unattributed_s")


@lru_cache(maxsize=256)
def _estimators(model: str, gpus_per_node: int, gpu_type: str, nodes: int, goal: str, seq_length: int,
                global_batch_size: int, precision: str, engine: str) -> Optional[Estimators]:
    from service.estimate.memory import model_shape

    try:
        request = make_request(model, gpus_per_node, gpu_type, nodes=nodes, goal=goal, seq_length=seq_length,
                               global_batch_size=global_batch_size, precision=precision, engine=engine)
    except (PlanError, UnknownModelError, UnknownHardwareError):
        return None
    return Estimators(request, model_shape(request.model))


def layout_of(record: RunRecord) -> Layout:
    lay = record.layout
    return Layout(tp=lay.tp, pp=lay.pp, vp=lay.vp, cp=lay.cp, ep=lay.ep, etp=lay.etp or 1, sp=lay.tp > 1,
                  micro_batch_size=lay.micro_batch_size, recompute=lay.recompute)


def _record_estimators(record: RunRecord) -> Optional[Estimators]:
    r = record.request
    precision = r.precision if r.precision in PRECISION_CHOICES else "bf16"  # a label the planner does not plan
    return _estimators(r.model, r.gpus_per_node, r.gpu_type, r.nodes, r.goal, r.seq_length, r.global_batch_size,
                       precision, PLANNER_ENGINE[record.provenance.engine])


def run_components(record: RunRecord) -> Optional[tuple]:
    """The planner's step-time components of the run's layout (StepTimeModel.components: the step and its terms);
    None when the planner cannot estimate the request (a Megatron run on the cpu card, a precision it does not
    plan)."""
    est = _record_estimators(record)
    if est is None:
        return None
    lay = layout_of(record)
    return est.time.components(lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.ep, lay.etp, lay.sp, lay.micro_batch_size,
                               lay.recompute, record.layout.sharding)


def run_estimate(record: RunRecord) -> Optional[StepTime]:
    """The planner's step time of the run's layout, with its terms; None where ``run_components`` is."""
    est = _record_estimators(record)
    return None if est is None else est.time.step_time(run_components(record))


def is_moe(record: RunRecord) -> bool:
    from recipe_index.models import find_bundled_model

    card = find_bundled_model(record.request.model)
    return bool(card and card.num_experts)


def with_estimate(record: RunRecord) -> RunRecord:
    """``record`` with the planner's estimate of its layout filled in where the way in gave none."""
    m = record.measurement
    if m.estimate_step_time_s is not None:
        return record
    found = run_estimate(record)
    if found is None:
        return record
    measured = m.model_copy(update={"estimate_step_time_s": found.step_time_s,
                                    "estimate_tokens_per_s_per_gpu": found.tokens_per_s_per_gpu})
    return record.model_copy(update={"measurement": measured})
