"""uvicorn's HTTP protocol with limits on the request headers: their size and the time to send them.

uvicorn's httptools protocol buffers headers of any size (a 20 MB header was answered 200) and waits for
them forever (connections that drip a header byte at a time stay open). ``LimitedHttpToolsProtocol``
answers 431 and closes when the headers of a request pass ``max_header_bytes``, and 408 and closes when
they are not complete ``header_timeout`` seconds after the connection opened or the request's first
byte arrived (and closes without an answer a connection that sent nothing by then). The idle time between
requests of a kept-alive connection stays uvicorn's ``timeout_keep_alive``.

The limits and their defaults: ``service.header_limits``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.header_limits import header_limits

log = logging.getLogger("recipe_advisor.http")

END_OF_HEADERS = b"\r\n\r\n"


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_header_bytes, self.header_timeout = header_limits()
        self._in_headers = True  # the bytes arriving now are a request line or headers
        self._header_bytes = 0
        self._last_bytes = b""  # the end of the previous chunk: the blank line may be split across two
        self._header_clock: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_header_clock()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._stop_header_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            seen = self._last_bytes + data
            end = seen.find(END_OF_HEADERS)
            if end == -1:
                self._header_bytes += len(data)
                self._last_bytes = seen[-(len(END_OF_HEADERS) - 1):]
            else:
                self._header_bytes += end + len(END_OF_HEADERS) - len(self._last_bytes)
                self._in_headers = False
            if self._header_bytes > self.max_header_bytes:
                self._refuse(431, f"request headers over {self.max_header_bytes:,} bytes")
                return
        super().data_received(data)

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_clock()

    def on_headers_complete(self) -> None:
        self._stop_header_clock()
        self._in_headers = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_headers, self._header_bytes, self._last_bytes = True, 0, b""

    def _start_header_clock(self) -> None:
        if self._header_clock is None:
            self._header_clock = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _stop_header_clock(self) -> None:
        if self._header_clock is not None:
            self._header_clock.cancel()
            self._header_clock = None

    def _headers_too_slow(self) -> None:
        self._header_clock = None
        if self._answering():  # a pipelined request waits for the answer to the one before: its client is not slow
            self._start_header_clock()
            return
        if self._header_bytes == 0:  # nothing sent (a browser's spare connection): closed as an idle one, silently
            self.transport.close()
            return
        self._refuse(408, f"request headers not complete after {self.header_timeout:g} s")

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, status: int, reason: str) -> None:
        """Answer ``status`` with ``reason`` as plain text and close: nothing of the request reached the app."""
        self._stop_header_clock()
        if self.transport.is_closing():
            return
        client = "%s:%d" % self.client if self.client else "a client"
        log.info("closed the connection of %s: %s", client, reason)
        if self._answering():  # a status line now would land inside the answer being sent
            self.transport.close()
            return
        phrase = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}[status]
        body = reason.encode() + b"\n"
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                             b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, phrase, len(body), body))
        self.transport.close()
