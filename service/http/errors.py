"""The error answers of the HTTP service, shared by every route and the app.

Bad input is a 4xx naming the field, the reason and the fix; nothing a client sends yields a 500 or
a traceback.
- 422: body or query of the wrong shape (FastAPI's validation error, `loc` names the field)
- 404: unknown model, GPU type or recipe, with the closest known names
- 400: a YAML document that cannot be read as a config (syntax, alias bomb, depth, binary, an
  integer beyond 64 bits), or a JSON body that cannot be read (a number over Python's 4,300 digits, nesting
  deeper than 64 levels)
- 413: a body over 1 MiB
A client that hangs up before its body has arrived is one info line in the log, not an error.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from recipe_index.errors import ModelConfigError, UnknownHardwareError, UnknownModelError, UnknownRecipeError
from service.configs.yamlio import YamlError
from service.http import schemas as m
from service.plan.types import PlanError

log = logging.getLogger("recipe_advisor.http")

JSON = "application/json"
# The error answers a route declares in the OpenAPI schema (``responses=pick(400, 404)``).
ERRORS = {
    400: {"model": m.ErrorResponse,
          "description": "The YAML cannot be read as a config (syntax, alias bomb, depth, binary)."},
    404: {"model": m.ErrorResponse,
          "description": "Unknown model, GPU type or recipe; `suggestions` lists the closest."},
    413: {"model": m.ErrorResponse, "description": "Request body over 1 MiB."},
    415: {"model": m.ErrorResponse, "description": "Body sent under a content type this endpoint does not read."},
}
BODY_PARSE_ERROR = "There was an error parsing the body"  # FastAPI's detail when json.loads fails on a body


def pick(*status: int) -> dict:
    return {code: ERRORS[code] for code in status}


def encode(model: BaseModel) -> bytes:
    return model.model_dump_json(by_alias=True).encode()


def error_body(detail: str, field: Optional[str], **extra: Any) -> dict:
    """The JSON of every error answer (``schemas.ErrorResponse``), without suggestions unless
    ``extra`` gives them (``extra``: suggestions, line, column)."""
    return {"detail": detail, "field": field, "suggestions": [], **extra}


def client_error(status: int, detail: str, field: Optional[str], **extra: Any) -> HTTPException:
    """An HTTPException whose body is an ``ErrorResponse`` (see ``error_body``)."""
    return HTTPException(status, error_body(detail, field, **extra))


@contextmanager
def unusable_yaml_is_400(field: str = "yaml") -> Iterator[None]:
    """Answer a YamlError raised inside with a 400 naming ``field`` and the line and column.

    A document other than /v1/validate's ``yaml`` (diff's ``base``, ``new``) is named in the detail too.
    """
    try:
        yield
    except YamlError as err:
        where = f" at line {err.line}, column {err.column or 1}" if err.line else ""
        fix = f"; fix: {err.fix}" if err.fix else ""
        named = "" if field == "yaml" else f"{field}: "
        raise client_error(400, f"{named}unusable YAML{where}: {err.reason}{fix}", field,
                           line=err.line, column=err.column) from None


def _error(status: int, detail: str, field: str | None = None, suggestions: list[str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(detail, field, suggestions=list(suggestions or [])))


def unreadable_body(cause: BaseException | None) -> str:
    """Why FastAPI could not read a JSON body, for the causes json.loads raises besides a syntax error
    (a syntax error is FastAPI's own 422 `json_invalid`, with the position)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the JSON body is not UTF-8 text (byte {cause.start}); fix: send the body encoded as UTF-8"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        return (f"the JSON body holds a number too large to read (over {sys.get_int_max_str_digits():,} digits); "
                'fix: send counts and sizes as ordinary numbers, e.g. "gpus": 8')
    return "the JSON body could not be read; fix: send one JSON object, encoded as UTF-8"


def install_error_handlers(app: FastAPI) -> None:
    """Map the library's typed errors onto HTTP statuses with the ErrorResponse body."""

    @app.exception_handler(UnknownModelError)
    async def _unknown_model(request: Request, exc: UnknownModelError) -> JSONResponse:
        # The library's message offers local paths, which the service never reads; say what works here.
        near = f" Closest bundled ids: {', '.join(exc.suggestions)}." if exc.suggestions else ""
        return _error(404, f"{exc.problem}.{near}", "model", exc.suggestions)

    @app.exception_handler(ModelConfigError)
    async def _bad_model_config(request: Request, exc: ModelConfigError) -> JSONResponse:
        return _error(400, f"model config {exc.problem}", "model")

    @app.exception_handler(UnknownHardwareError)
    async def _unknown_hardware(request: Request, exc: UnknownHardwareError) -> JSONResponse:
        return _error(404, str(exc), "gpu_type", list(exc.suggestions or exc.known))  # card names, each once

    @app.exception_handler(UnknownRecipeError)
    async def _unknown_recipe(request: Request, exc: UnknownRecipeError) -> JSONResponse:
        return _error(404, str(exc), "name", exc.suggestions)

    @app.exception_handler(PlanError)
    async def _cannot_plan(request: Request, exc: PlanError) -> JSONResponse:
        return _error(400, str(exc), exc.field, exc.suggestions)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if isinstance(exc.detail, dict):
            return JSONResponse(status_code=exc.status_code, content=exc.detail, headers=exc.headers)
        detail, field = str(exc.detail), "body" if exc.status_code == 413 else None
        if exc.status_code == 400 and detail == BODY_PARSE_ERROR:
            detail, field = unreadable_body(exc.__cause__), "body"
        response = _error(exc.status_code, detail, field)
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's shape (`detail: [{loc, msg, type}]`), minus `input`: it can echo a 1 MiB body back.
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": errors})

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client hung up before its body arrived: its business, not an error of ours. Nobody reads the answer.
        client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.info("%s disconnected before sending the whole body of %s %s", client, request.method, request.url.path)
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A bug of ours, not the client's: log the traceback here, never send it.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(500, "internal error; the request was logged. Please report it with the request body.")
