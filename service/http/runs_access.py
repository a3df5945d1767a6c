"""Who may read and write the runs store over HTTP.

Writes (POST and DELETE /v1/runs) and reads that return a config's text (configs can be proprietary) need the
operator's token, sent as ``Authorization: Bearer <RECIPE_ADVISOR_TOKEN>``, whenever the token is set or the
service listens beyond loopback (``recipe-advisor serve --host 0.0.0.0`` sets RECIPE_ADVISOR_PUBLIC; a socket
bound to another address tells it too). Listening beyond loopback with no token set, writes are refused: there
is nothing to check them against. Measured figures beside the estimates (plan's ``measured.yours``) stay open.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from typing import Optional

from fastapi import Request

from service.http.errors import client_error

TOKEN_ENV = "RECIPE_ADVISOR_TOKEN"
PUBLIC_ENV = "RECIPE_ADVISOR_PUBLIC"


def _loopback(host: Optional[str]) -> bool:
    if host in (None, "localhost", "testserver"):  # testserver: the in-process test client
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listens_beyond_loopback(request: Request) -> bool:
    server = request.scope.get("server")
    return os.environ.get(PUBLIC_ENV) == "1" or not _loopback(server[0] if server else None)


def token_required(request: Request) -> bool:
    return bool(os.environ.get(TOKEN_ENV)) or listens_beyond_loopback(request)


def presented_token(request: Request) -> Optional[str]:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def authorized(request: Request) -> bool:
    """Whether this request may write, or read config text."""
    if not token_required(request):
        return True
    expected, given = os.environ.get(TOKEN_ENV), presented_token(request)
    return bool(expected and given) and hmac.compare_digest(expected.encode(), given.encode())


def require_token(request: Request) -> None:
    if authorized(request):
        return
    if not os.environ.get(TOKEN_ENV):
        why = "this service listens beyond loopback and has no RECIPE_ADVISOR_TOKEN set, so it takes no writes"
        fix = "the operator sets RECIPE_ADVISOR_TOKEN on the server; clients send it as Authorization: Bearer"
    else:
        why = "a write to the runs store needs the service's token"
        fix = "send Authorization: Bearer <RECIPE_ADVISOR_TOKEN>"
    error = client_error(401, f"{why}; {fix}", "authorization")
    error.headers = {"WWW-Authenticate": "Bearer"}
    raise error
