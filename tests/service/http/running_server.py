"""A real uvicorn serving the app on 127.0.0.1 in a thread, for tests that speak raw HTTP over a socket."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import uvicorn

from service.http.app import create_app


@contextmanager
def running_server(**config: Any) -> Iterator[int]:
    """Serve a fresh app with uvicorn ``config`` options; yields the port. ``log_config=None`` lets uvicorn's own
    records reach the root logger, so ``caplog`` sees them."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound here and handed over: a port found free and bound later can be taken
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_config=None, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start within 30 s"
            time.sleep(0.05)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def wait_until(condition, seconds: float) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
