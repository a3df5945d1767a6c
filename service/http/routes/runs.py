"""/v1/runs: record a run (a job's epilogue POSTs it), list and filter runs, read or delete one.

Thin routes over ``service.runs``: the body is a ``RunRecord`` (the schema `runs export` writes); every way in
checks it alike (known model and GPU type, the planner's estimate stored beside it). Who may write or read
config text: ``service.http.runs_access``.
"""

from __future__ import annotations

from typing import Literal, Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from service.http.errors import client_error
from service.http.limits import StrictRequestRoute
from service.http.runs_access import authorized, require_token
from service.http.schemas.responses import ErrorResponse
from service.runs.advice import reading_store, writing_store
from service.runs.errors import RunInputError
from service.runs.ingest import prepared
from service.runs.schema import RunRecord
from service.runs.store import StoreError

router = APIRouter(route_class=StrictRequestRoute, tags=["runs"])
MAX_LIST = 1000


class RunAdded(BaseModel):
    id: int = Field(description="The stored run's id.", examples=[12])
    created: bool = Field(description="False when the same run was stored before (the answer names that run).",
                          examples=[True])


class RunList(BaseModel):
    runs: list[RunRecord] = Field(description="Newest first. config_text is left out without the token where the "
                                  "token is required.")


def _unusable(err: RunInputError):
    return client_error(400, err.problem + (f"; {err.fix}" if err.fix else ""), err.where)


def _public(run: RunRecord, request: Request) -> RunRecord:
    return run if authorized(request) else run.model_copy(update={"config_text": None})


TOKEN_REFUSED = {401: {"description": "A token is required and was not sent (or is wrong)."}}


# The token is checked as a dependency: before the body is read, so a request without it learns nothing else.
@router.post("/v1/runs", response_model=RunAdded, status_code=201, summary="Record a measured run",
             dependencies=[Depends(require_token)],
             responses={200: {"model": RunAdded, "description": "The same run was stored before."},
                        400: {"model": ErrorResponse, "description": "A run the store cannot use: a model or GPU type "
                              "the index does not know, fields that disagree (the detail names the field)."},
                        **TOKEN_REFUSED})
def add_run(record: RunRecord):
    try:
        run_id, created = writing_store().add(prepared(record.model_copy(update={"id": None, "recorded_at": None})))
    except RunInputError as err:
        raise _unusable(err) from None
    except StoreError as err:
        raise client_error(503, str(err), None) from None
    return JSONResponse({"id": run_id, "created": created}, status_code=201 if created else 200)


@router.get("/v1/runs", response_model=RunList, summary="Runs, filtered by model, hardware, engine, team")
def list_runs(request: Request, model: Optional[str] = None, gpu_type: Optional[str] = None,
              engine: Optional[Literal["bundled", "megatron", "automodel"]] = None, team: Optional[str] = None,
              cluster: Optional[str] = None, outcome: Optional[str] = None,
              source: Optional[Literal["yours", "published"]] = None,
              limit: int = Query(100, ge=1, le=MAX_LIST)):
    store = reading_store()
    runs = [] if store is None else store.query(model=model, gpu_type=gpu_type, engine=engine, team=team,
                                                 cluster=cluster, outcome=outcome, source=source, limit=limit)
    return {"runs": [_public(run, request).model_dump(mode="json") for run in runs]}


def _found(run_id: int) -> RunRecord:
    store = reading_store()
    run = None if store is None else store.get(run_id)
    if run is None:
        raise client_error(404, f"no run {run_id} in the runs store; GET /v1/runs lists the ids", "id")
    return run


NO_SUCH_RUN = {404: {"model": ErrorResponse, "description": "No run of this id in the store."}}


@router.get("/v1/runs/{run_id}", response_model=RunRecord, summary="One run in full", responses=NO_SUCH_RUN)
def get_run(run_id: int, request: Request):
    return _public(_found(run_id), request).model_dump(mode="json")


@router.delete("/v1/runs/{run_id}", status_code=204, summary="Delete a run", dependencies=[Depends(require_token)],
               responses={**TOKEN_REFUSED, **NO_SUCH_RUN})
def delete_run(run_id: int):
    _found(run_id)
    writing_store().delete(run_id)
    return Response(status_code=204)
