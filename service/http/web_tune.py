"""The Tune view of the web page: for a request, the trials the runs store holds (sorted by measurement, beside
the estimate, failures with their reason, the estimate's pair order) and the sweep a user would run.

The page reads: its form is a GET that shows, and nothing on it starts training. A tune runs where the user
runs it (`recipe-advisor tune` on their machine, or the sweep on their cluster), and its trials land in the
store this page reads (service.tune.overview).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

import recipe_index as index
from recipe_index.errors import UnknownHardwareError, UnknownModelError
from service.http import schemas as m
from service.http.routes.tune import TuneBody, tune_candidates
from service.http.web import (
    ENGINES,
    GOALS,
    GRAD_REDUCE_DTYPES,
    PRECISIONS,
    Problem,
    form_body,
    form_defaults,
    lookup_problem,
    query_problems,
    render,
)
from service.plan.types import PlanError
from service.request import least
from service.runs.advice import reading_store

router = APIRouter(include_in_schema=False)
TUNE_FIELDS = ("model", "gpu_type", "gpus", "nodes", "goal", "seq_length", "engine", "precision",
               "grad_reduce_dtype", "emit", "trials", "steps", "warmup")
SWEEP_FORMATS = [("", "The engine's own (Megatron Bridge or bundled)"), ("automodel", "NeMo AutoModel recipes")]
ENGINE_NAMES = {"megatron": "Megatron Bridge", "bundled": "the bundled trainer", "automodel": "NeMo AutoModel"}
TUNE_DEFAULTS = {"trials": "8", "steps": "30", "warmup": "5"}


def tune_form(query: Any) -> dict:
    """The form's values: the recommend form's fields (a result page links here with its query) and tune's own."""
    form = form_defaults(query)
    form.update({key: str(query.get(key, default) or "").strip()[:16] for key, default in TUNE_DEFAULTS.items()})
    return form


def _context(form: dict, **extra: Any) -> dict:
    return {"page": "tune", "form": form, "models": index.list_models(), "hardware": index.list_hardware(),
            "goals": GOALS, "engines": ENGINES, "formats": SWEEP_FORMATS, "precisions": PRECISIONS,
            "grad_reduce_dtypes": GRAD_REDUCE_DTYPES, "engine_names": ENGINE_NAMES, "tune": None,
            "limits": {"gpus": m.MAX_GPUS, "nodes": m.MAX_NODES, "seq_length": m.MAX_SEQ_LENGTH,
                       "least_seq_length": least("seq_length")}, **extra}


def _overview(body: TuneBody, emit: str) -> dict:
    from service.tune.overview import tune_overview

    prepared, advice, candidates = tune_candidates(body)
    view = tune_overview(prepared, advice, candidates, emit=emit, trials=body.trials, steps=body.steps,
                         warmup=body.warmup, store=reading_store())
    req = prepared.request
    view["request"] = {"model": req.model.id, "gpus_per_node": req.gpus_per_node, "nodes": req.num_nodes,
                       "gpu_type": req.hardware.name, "goal": prepared.goal, "engine": prepared.engine,
                       "seq_length": req.seq_length, "global_batch_size": req.global_batch_size}
    return view


@router.get("/tune", response_class=HTMLResponse)
async def tune_page(request: Request) -> HTMLResponse:
    query = request.query_params
    form = tune_form(query)
    if not query:
        return render(request, "tune.html", _context(form))
    problems = query_problems(query, TUNE_FIELDS)
    body_fields = tuple(key for key in TUNE_FIELDS if key != "emit")  # the sweep format is the page's, not the body's
    body, problems = (None, problems) if problems else form_body(form, TuneBody, body_fields)
    emit = form["emit"] or "recipe-advisor"
    if emit not in m.EMIT.__args__:
        problems.append(Problem(f"unknown sweep format {emit[:40]!r}; choose one of the list", "emit"))
    status = 422
    if body is not None and not problems:
        try:
            view = await run_in_threadpool(_overview, body, emit)
        except (UnknownModelError, UnknownHardwareError) as err:
            problems, status = [lookup_problem(err)], 404
        except PlanError as err:
            problems, status = [Problem(str(err), err.field)], 400
        else:
            return render(request, "tune.html", _context(form, tune=view))
    return render(request, "tune.html", _context(form, problems=problems), status_code=status)
