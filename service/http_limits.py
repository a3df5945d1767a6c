"""ASGI middleware that bounds what one request may cost the service.

``BodyLimitMiddleware`` refuses a body over the cap with 413 before reading it
when ``Content-Length`` says so, and otherwise counts the bytes as they stream
in (chunked uploads have no length) and stops at the cap, so a client can never
make the server buffer more than ``max_body_bytes``.

``SecurityHeadersMiddleware`` adds the headers a browser needs to treat the
HTML pages as inert data: no sniffing, no framing, scripts only from /static.
"""

from __future__ import annotations

import json
from html import escape

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a recipe YAML is a few KiB; the biggest bundled one is far below this


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
            return int(text) if text.isdigit() else -1
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
        body = json.dumps({"detail": detail, "field": field, "suggestions": []}).encode()
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


# Swagger UI (/docs) loads its script and style from a CDN, so the strict policy applies to our pages only.
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
