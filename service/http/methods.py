"""HEAD and OPTIONS for every route, and a 405's ``Allow`` that names every method a path serves.

FastAPI routes answer only the methods they declare, so ``curl -I`` and health checkers that send HEAD
got a 405, and a path served by two routes (``GET /validate`` and ``POST /validate``) answered a wrong
method with the ``Allow`` of whichever route came first. ``MethodsMiddleware`` answers HEAD as the GET
of the same URL without its body (the headers, ``content-length`` included, stay those of the GET),
and OPTIONS with ``Allow`` listing what the path serves.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Methods a route is asked about: probing with ``matches`` works for every kind of route, an included router too.
PROBED = ("GET", "POST", "PUT", "PATCH", "DELETE")
ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(routes: list[BaseRoute], scope: Scope) -> list[str]:
    """The methods served at the scope's path, in a stable order; empty when no route has the path."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Mount):  # /static: a mount matches whatever the method; its files are read-only
            if route.matches(scope)[0] != Match.NONE:
                methods |= {"GET"}
            continue
        methods |= {m for m in PROBED if route.matches({**scope, "method": m})[0] == Match.FULL}
    if not methods:
        return []
    if "GET" in methods:
        methods.add("HEAD")
    methods.add("OPTIONS")
    return [m for m in ORDER if m in methods]


class MethodsMiddleware:
    def __init__(self, app: ASGIApp, routes: list[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method") if scope["type"] == "http" else None
        allow = allowed_methods(self.routes, scope) if method == "OPTIONS" else None
        if allow:
            await _send_allow(send, allow)
            return
        if method is None:  # lifespan and websocket scopes pass through untouched
            await self.app(scope, receive, send)
            return
        if method == "HEAD":
            scope = {**scope, "method": "GET"}
        asked = dict(scope)  # routing updates the scope in place (a mount moves its path into root_path)

        async def send_fixed(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allow = ", ".join(allowed_methods(self.routes, asked)).encode()
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message = {**message, "headers": [*headers, (b"allow", allow)]}
            elif message["type"] == "http.response.body" and method == "HEAD":
                message = {**message, "body": b""}
            await send(message)

        await self.app(scope, receive, send_fixed)


async def _send_allow(send: Send, allow: list[str]) -> None:
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"allow", ", ".join(allow).encode()), (b"content-length", b"0")],
    })
    await send({"type": "http.response.body", "body": b""})
