"""The HTTP service: REST API under /v1, the web form at /, OpenAPI at /openapi.json and /docs.

``create_app()`` builds a fresh app (tests build their own); ``app`` is the one
``uvicorn service.http.app:app`` and ``recipe-advisor serve`` run. The app holds no
state between requests, so workers and replicas scale it without coordination. How errors are
answered: ``service.http.errors``.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from service.http import web, web_runs, web_tune
from service.http.about import DESCRIPTION, TAGS, version
from service.http.errors import install_error_handlers
from service.http.limits import MAX_BODY_BYTES, BodyLimitMiddleware, SecurityHeadersMiddleware
from service.http.methods import MethodsMiddleware
from service.http.routes import advise, catalog, health, runs, tune, validate

DOCS_ASSETS = "/static-docs"


def static_dir() -> str:
    return str(resources.files("templates") / "static")


def create_app(max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    # /docs and /redoc load Swagger UI and ReDoc from the files fastapi-offline bundles (under DOCS_ASSETS), not
    # from a CDN: an air-gapped cluster's browser renders them too.
    app: FastAPI = FastAPIOffline(title="Recipe Advisor", version=version(), description=DESCRIPTION,
                                  openapi_tags=TAGS, static_url=DOCS_ASSETS)
    install_error_handlers(app)
    # this order is the order of /openapi.json
    for routes in (health, validate, catalog, advise, tune, runs, web, web_runs, web_tune):
        app.include_router(routes.router)
    app.mount("/static", StaticFiles(directory=static_dir()), name="static")
    # Added last = outermost: the body cap applies before any route or parser sees a byte.
    app.add_middleware(MethodsMiddleware, routes=app.router.routes)
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes)
    return app


app = create_app()
