"""A client that hangs up in the middle of its body costs one info line in the log, not a traceback."""

from __future__ import annotations

import logging
import socket

import pytest

from tests.service.http.running_server import running_server, wait_until

POSTS = [
    ("/v1/validate", "text/plain"),
    ("/v1/recommend", "application/json"),
    ("/validate", "application/x-www-form-urlencoded"),
]


@pytest.mark.parametrize(("path", "content_type"), POSTS)
def test_a_body_cut_short_is_one_info_line(caplog, path, content_type):
    caplog.set_level(logging.INFO)
    with running_server(log_level="info") as port:
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\n"
                       "Content-Length: 1000\r\n\r\n".encode() + b"x" * 100)
        client.close()
        assert wait_until(lambda: any("disconnected before" in r.getMessage() for r in caplog.records), 10)
    gone = [r for r in caplog.records if "disconnected before sending the whole body" in r.getMessage()]
    assert len(gone) == 1 and gone[0].levelno == logging.INFO and path in gone[0].getMessage()
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert not noisy, [r.getMessage() for r in noisy]
