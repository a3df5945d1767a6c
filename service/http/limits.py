"""ASGI middleware that bounds what one request may cost the service.

``BodyLimitMiddleware`` refuses a body over the cap with 413 before reading it
when ``Content-Length`` says so, and otherwise counts the bytes as they stream
in (chunked uploads have no length) and stops at the cap, so a client can never
make the server buffer more than ``max_body_bytes``.

``SecurityHeadersMiddleware`` adds the headers a browser needs to treat the
HTML pages as inert data: no sniffing, no framing, scripts only from /static.

``StrictRequestRoute`` is the route class of the API routers (``/healthz`` excepted, so a
probe's cache-buster is no 422): it refuses, before
the endpoint runs, what FastAPI would otherwise read silently: a query parameter
the route does not declare or one given twice (422), a JSON body with a key
written twice (400; JSON keeps the last) or nested too deeply (400), and a JSON-model body sent under
another content type (415, instead of "Input should be a valid dictionary").
"""

from __future__ import annotations

import json
import types
import typing
from html import escape
from typing import Any, Callable, Coroutine

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.errors import client_error, error_body

# A single-valued query parameter given twice (the API's 422 and the web form's problem say the same).
REPEATED_PARAMETER = "given more than once; give it once (the value is not a list)"

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a recipe YAML is a few KiB; the biggest bundled one is far below this
MAX_JSON_DEPTH = 64  # as for YAML; a request body nests three or four levels (overrides)
TOO_DEEP = (f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels; "
            "fix: send one JSON object whose values nest a few levels at most")


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` so that FastAPI's body parsing passes it on as a 413 (it re-raises HTTPException)."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=_too_large_message(limit))


def _too_large_message(limit: int) -> str:
    return (
        f"request body is larger than {limit // 1024} KiB; "
        "send one config document at a time (recipes are a few KiB)"
    )


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared == -1:
            await _send_error(send, 400, "Content-Length header is not a non-negative integer", "content-length")
            return
        if declared is not None and declared > self.max_body_bytes:
            await _send_error(send, 413, _too_large_message(self.max_body_bytes), "body", _wants_html(scope))
            return

        received = 0
        response_started = False

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, capped_receive, tracking_send)
        except BodyTooLarge:
            # Normally the exception handlers turn it into a 413; this catches a read outside a route.
            if response_started:
                raise
            await _send_error(send, 413, _too_large_message(self.max_body_bytes), "body", _wants_html(scope))


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None when absent, -1 when malformed."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isascii() and text.isdigit() else -1
    return None


def _wants_html(scope: Scope) -> bool:
    """A browser submitting one of the pages (not the API) gets a page back, not JSON."""
    if scope.get("path", "").startswith("/v1/"):
        return False
    return any(name == b"accept" and b"text/html" in value for name, value in scope.get("headers", ()))


async def _send_error(send: Send, status: int, detail: str, field: str, html: bool = False) -> None:
    if html:
        text = escape(detail)
        body = (f"<!doctype html><title>Request too large</title><h1>{status}: request too large</h1>"
                f"<p>{text}</p><p>Go back and send a smaller file.</p>").encode()
        content_type = b"text/html; charset=utf-8"
    else:
        body = json.dumps(error_body(detail, field)).encode()
        content_type = b"application/json"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# Swagger UI (/docs) and ReDoc (/redoc) start from an inline script (FastAPI's page), so the strict policy
# applies to our pages only; their scripts and styles are served from this server (service/http/app.py).
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
_DOCS_PATHS = ("/docs", "/redoc")


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        strict = not scope.get("path", "").startswith(_DOCS_PATHS)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                if strict:
                    headers.append((b"x-frame-options", b"DENY"))
                    headers.append((b"content-security-policy", _CSP.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


# ------------------------------------------------------------------ strict requests


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


def _takes_many(field: Any) -> bool:
    """A query parameter declared as a list (``?tag=a&tag=b``); every other one takes one value."""
    annotation = field.field_info.annotation
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)  # Optional[X] and X | None
    options = typing.get_args(annotation) if union else (annotation,)
    return any(typing.get_origin(t) in (list, set, tuple, frozenset) for t in options)


class _Pairs(dict):
    """A JSON object as parsed, remembering the keys its text wrote more than once."""

    repeated: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    obj, seen, repeated = _Pairs(pairs), set(), []
    for key, _ in pairs:
        if key in seen and key not in repeated:
            repeated.append(key)
        seen.add(key)
    obj.repeated = tuple(repeated)
    return obj


def check_json_body(body: bytes) -> None:
    """Refuse (400) a JSON body nested deeper than ``MAX_JSON_DEPTH`` or writing a key twice, whichever the
    body shows first. A body that is not JSON at all passes: the body parser answers that with its own error."""
    try:
        root = json.loads(body, object_pairs_hook=_pairs)
    except RecursionError:  # deeper than Python's parser goes, so far deeper than the limit
        raise client_error(400, TOO_DEEP, "body") from None
    except ValueError:
        return
    stack: list[tuple[str, int, Any]] = [("", 0, root)]
    while stack:  # iterative: nesting depth is the client's choice
        path, depth, node = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise client_error(400, TOO_DEEP, "body")
        if isinstance(node, _Pairs) and node.repeated:
            key = f"{path}.{node.repeated[0]}" if path else node.repeated[0]
            raise client_error(
                400, f"the JSON body sets `{key}` twice, and JSON would silently keep only the last value; "
                "fix: send each key once", key)
        if isinstance(node, dict):
            children = [(f"{path}.{key}" if path else key, value) for key, value in node.items()]
        elif isinstance(node, list):
            children = [(f"{path}[{i}]", value) for i, value in enumerate(node)]
        else:
            children = []
        stack.extend((child_path, depth + 1, value) for child_path, value in reversed(children))  # in body order


class StrictRequestRoute(APIRoute):
    """An API route that refuses unknown or repeated query parameters, repeated JSON keys and a
    JSON-model body under a non-JSON content type (see the module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        fields, stack = {}, [self.dependant]
        while stack:
            dependant = stack.pop()
            fields.update({f.alias: f for f in dependant.query_params})
            stack.extend(dependant.dependencies)
        takes_json_model = self.body_field is not None

        async def strict_handler(request: Request) -> Response:
            self._check_query(request, fields)
            media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            body = await request.body()
            if takes_json_model and body and not _is_json(media_type):
                sent = f"content type {media_type!r} is" if media_type else "a body without a content type is"
                raise client_error(
                    415, f"{sent} not accepted here: send the body as JSON with `Content-Type: application/json`",
                    "content-type")
            if body and _is_json(media_type):
                check_json_body(body)
            return await handle(request)

        return strict_handler

    @staticmethod
    def _check_query(request: Request, fields: dict[str, Any]) -> None:
        errors = []
        for name in dict.fromkeys(request.query_params.keys()):
            if name not in fields:
                known = ", ".join(sorted(fields)) or "none"
                errors.append({"loc": ("query", name), "type": "extra_forbidden", "input": None,
                               "msg": f"unknown query parameter; this endpoint takes: {known}"})
            elif len(request.query_params.getlist(name)) > 1 and not _takes_many(fields[name]):
                errors.append({"loc": ("query", name), "type": "too_many_values", "input": None,
                               "msg": REPEATED_PARAMETER})
        if errors:  # a misspelt parameter would otherwise be ignored, a repeated one silently take the last
            raise RequestValidationError(errors)
