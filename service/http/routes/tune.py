"""POST /v1/tune: the trials a request's `recipe-advisor tune` would run, with what the runs store already measured
of them, and the commands that run the tune. The service never launches training: the tune runs where the user
runs it (`tune` here, or `tune --emit-sweep` on a cluster), and its trials land in the store this reads."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from service.http import schemas as m
from service.http.errors import ERRORS, client_error
from service.http.limits import StrictRequestRoute
from service.http.routes.advise import body_request
from service.plan.types import PlanError
from service.runs.advice import reading_store

router = APIRouter(tags=["advise"], route_class=StrictRequestRoute)


class TuneBody(m.PlanBody):
    """What to tune; the fields of `recipe-advisor tune`."""

    trials: int = Field(default=8, ge=1, le=64, description="Trials the tune runs at most.", examples=[8])
    steps: int = Field(default=30, ge=1, le=100_000, description="Timed steps per trial.", examples=[30])
    warmup: int = Field(default=5, ge=0, le=100_000, description="Untimed steps before them.", examples=[5])


class TuneTrial(BaseModel):
    index: int
    layout: str
    kind: str = Field(description="recommended, shape, micro batch, recompute, strategy or fast path.")
    why: str
    estimate_tokens_per_s_per_gpu: float
    measured_tokens_per_s_per_gpu: Optional[float] = Field(
        description="From the runs store, when it holds this trial (same trial config and software); else null.")
    outcome: Optional[str] = Field(description="The stored trial's outcome; null when not run yet.")
    detail: Optional[str]


class TuneSkipped(BaseModel):
    layout: str
    reason: str


class TuneResponse(BaseModel):
    trials: list[TuneTrial] = Field(description="In the order tune runs them.")
    best_measured: Optional[TuneTrial]
    measured: int = Field(description="How many of the trials the store has measured.")
    skipped: list[TuneSkipped] = Field(description="Layouts not run: they do not fit, or a rule refuses them.")
    commands: dict[str, str] = Field(description="here: run the tune on this machine (bundled engine); sweep: write "
                                                 "it for a cluster; collect: read the sweep's logs back.")


def _view(body: TuneBody) -> dict:
    from service.recommend.layout_source import choose_layout
    from service.recommend.recommendation import prepare
    from service.tune.candidates import select_candidates
    from service.tune.view import tune_view

    advice = body_request(body)
    prepared = prepare(advice, read_runs=False)
    first, source = choose_layout(prepared.result, prepared.recipe, prepared.given)
    compiled = False if prepared.engine == "bundled" else None
    candidates = select_candidates(prepared.result, first, source.summary, compiled=compiled)
    return tune_view(prepared, advice, candidates, trials=body.trials, steps=body.steps, warmup=body.warmup,
                     store=reading_store())


@router.post("/v1/tune", response_model=TuneResponse, summary="The trials a tune runs, and what the store measured",
             responses={400: {"model": m.ErrorResponse}, 404: ERRORS[404], 413: ERRORS[413], 415: ERRORS[415]})
async def tune(body: TuneBody) -> dict:
    try:
        return await run_in_threadpool(_view, body)
    except PlanError as err:
        raise client_error(400, str(err), err.field) from None
