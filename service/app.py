"""The HTTP service: REST API under /v1, the web form at /, OpenAPI at /openapi.json and /docs.

``create_app()`` builds a fresh app (tests build their own); ``app`` is the one
``uvicorn service.app:app`` and ``recipe-advisor serve`` run. The app holds no
state between requests, so workers and replicas scale it without coordination.

Error policy (DESIGN.md, "HTTP"): bad input is a 4xx naming the field, the
reason and the fix; nothing a client sends yields a 500 or a traceback.
- 422: body or query of the wrong shape (FastAPI's validation error, `loc` names the field)
- 404: unknown model, GPU type or recipe, with the closest known names
- 400: a YAML document that cannot be read as a config (syntax, alias bomb, depth, binary, an
  integer beyond 64 bits), or a JSON body that cannot be read (a number over Python's 4,300 digits)
- 413: a body over 1 MiB
"""

from __future__ import annotations

import logging
import sys
from importlib import metadata, resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from recipe_index.errors import ModelConfigError, UnknownHardwareError, UnknownModelError, UnknownRecipeError
from service.planner import PlanError
from service.http_limits import MAX_BODY_BYTES, BodyLimitMiddleware, SecurityHeadersMiddleware, error_body

log = logging.getLogger("recipe_advisor.http")

DESCRIPTION = """\
Pick, size and validate LLM training recipes before you spend GPU hours.

* **POST /v1/recommend**: a ready config for a model, hardware and goal, with layout, estimates and launch commands.
* **POST /v1/plan**: the ranked parallel layouts with memory and step-time estimates.
* **POST /v1/validate**: check a config (YAML as `text/plain`, or JSON `{"yaml": ...}`); findings carry line and column.
* **POST /v1/diff**: every key that differs between two configs, as convergence, execution or benchmark-only.
* **GET /v1/recipes**, **/v1/models**, **/v1/hardware**: browse the bundled index.

Errors: 422 names the field (a wrong type too: `"gpus": "8"` is refused); 404 lists the closest
known names; 400 is a YAML document or a JSON body that cannot be read; 413 is a body over 1 MiB.
Every error body except 422 is `ErrorResponse`.
"""

TAGS = [
    {"name": "advise", "description": "Plan, recommend, validate and diff configs."},
    {"name": "index", "description": "The bundled recipes, model cards and hardware cards."},
    {"name": "service", "description": "Liveness."},
]


def version() -> str:
    try:
        return metadata.version("recipe-advisor")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+source"


def static_dir() -> str:
    return str(resources.files("templates") / "static")


def _error(status: int, detail: str, field: str | None = None, suggestions: list[str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(detail, field, suggestions=list(suggestions or [])))


BODY_PARSE_ERROR = "There was an error parsing the body"  # FastAPI's detail when json.loads fails on a body


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

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
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

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A bug of ours, not the client's: log the traceback here, never send it.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(500, "internal error; the request was logged. Please report it with the request body.")


def create_app(max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    from service import api, api_advise, web
    from service.rules.registry import all_rules

    # Register every rule module now, so the first request of a worker judges by the same
    # rules as the thousandth (the planner only loads them when none are registered yet).
    all_rules()

    app = FastAPI(
        title="Recipe Advisor",
        version=version(),
        description=DESCRIPTION,
        openapi_tags=TAGS,
    )
    install_error_handlers(app)
    app.include_router(api.router)
    app.include_router(api_advise.router)
    app.include_router(web.router)
    app.mount("/static", StaticFiles(directory=static_dir()), name="static")
    # Added last = outermost: the body cap applies before any route or parser sees a byte.
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes)
    return app


app = create_app()
