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


TUNE_EXAMPLE = ("recipe-advisor tune --model llama3-8b --gpus 8 --gpu-type h100 --goal pretrain --engine bundled "
                "--trials 8 --steps 30 --warmup 5")


class TuneTrial(BaseModel):
    index: int = Field(description="The trial's place in the order tune runs them (1: first).", examples=[1])
    layout: str = Field(description="The layout: parallel sizes, micro batch, recompute, strategy, fast paths.",
                        examples=["TP1 PP1 CP1 EP1 mbs1 rc:none fsdp2"])
    kind: str = Field(description="recommended, shape, micro batch, recompute, strategy or fast path.",
                      examples=["recompute"])
    why: str = Field(description="Why this trial is run: where its layout comes from or what it varies.",
                     examples=["recompute selective instead of none"])
    estimate_tokens_per_s_per_gpu: float = Field(description="The planner's estimated tokens/s per GPU.",
                                                 examples=[7100.0])
    measured_tokens_per_s_per_gpu: Optional[float] = Field(
        description="From the runs store, when it holds this trial (same trial config and software); else null.",
        examples=[7350.5])
    outcome: Optional[str] = Field(description="The stored trial's outcome; null when not run yet.",
                                   examples=["completed"])
    detail: Optional[str] = Field(description="The stored trial's outcome detail (why it stopped); else null.",
                                  examples=[None])


class TuneSkipped(BaseModel):
    layout: str = Field(description="The layout not run, or a count of parallel shapes a rule rejected.",
                        examples=["TP1 PP1 CP1 EP1 mbs1 rc:none ddp"])
    reason: str = Field(description="Why it is not run: the rule that refuses it, or the memory it needs.",
                        examples=["needs 92.4 GiB per GPU; h100 offers 75.0 GiB after 5% headroom"])


class TuneResponse(BaseModel):
    trials: list[TuneTrial] = Field(description="In the order tune runs them.")
    best_measured: Optional[TuneTrial] = Field(
        description="The trial with the highest measured tokens/s per GPU; null when the store has measured none.")
    measured: int = Field(description="How many of the trials the store has measured.", examples=[3])
    skipped: list[TuneSkipped] = Field(description="Layouts not run: they do not fit, or a rule refuses them.")
    commands: dict[str, str] = Field(
        description="here: run the tune on this machine (bundled engine); sweep: write it for a cluster; "
                    "collect: read the sweep's logs back.",
        examples=[{"here": f"{TUNE_EXAMPLE} -o best.yaml", "sweep": f"{TUNE_EXAMPLE} --emit-sweep tune-sweep",
                   "collect": f"{TUNE_EXAMPLE} --collect tune-sweep"}])


def tune_candidates(body: TuneBody) -> tuple:
    """(prepared request, advice request, candidates) of a tune body, as `recipe-advisor tune` selects them."""
    from service.recommend.layout_source import choose_layout
    from service.recommend.recommendation import prepare
    from service.tune.candidates import select_candidates

    advice = body_request(body)
    prepared = prepare(advice, read_runs=False)
    first, source = choose_layout(prepared.result, prepared.recipe, prepared.given)
    compiled = False if prepared.engine == "bundled" else None
    return prepared, advice, select_candidates(prepared.result, first, source.summary, compiled=compiled)


def _view(body: TuneBody) -> dict:
    from service.tune.view import tune_view

    prepared, advice, candidates = tune_candidates(body)
    return tune_view(prepared, advice, candidates, trials=body.trials, steps=body.steps, warmup=body.warmup,
                     store=reading_store())


@router.post("/v1/tune", response_model=TuneResponse, summary="The trials a tune runs, and what the store measured",
             responses={400: {"model": m.ErrorResponse}, 404: ERRORS[404], 413: ERRORS[413], 415: ERRORS[415]})
async def tune(body: TuneBody) -> dict:
    try:
        return await run_in_threadpool(_view, body)
    except PlanError as err:
        raise client_error(400, str(err), err.field) from None
