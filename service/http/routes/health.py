"""GET /healthz: liveness, the version and the size of the bundled index."""

from __future__ import annotations

from functools import lru_cache

from fastapi import APIRouter
from fastapi.responses import Response

import recipe_index as index
from service.http import schemas as m
from service.http.about import version
from service.http.errors import JSON, encode

# Not the /v1 routes' StrictRequestRoute: load balancers and uptime checkers add cache-busting query
# strings, which a liveness probe must not answer with a 422.
router = APIRouter()


@lru_cache(maxsize=1)
def _health() -> bytes:
    return encode(
        m.HealthResponse(
            status="ok",
            version=version(),
            recipes=len(index.list_recipes()),
            models=len(index.list_models()),
            hardware=len(index.list_hardware()),
        )
    )


@router.get("/healthz", response_model=m.HealthResponse, tags=["service"], summary="Liveness and index size")
async def healthz() -> Response:
    return Response(_health(), media_type=JSON)
