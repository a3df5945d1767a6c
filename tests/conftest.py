"""Fixtures shared by the HTTP tests: the app through the ASGI test client, and a real server on loopback."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn
from fastapi.testclient import TestClient

from service.app import create_app


@pytest.fixture(scope="module")
def client():
    """The app behind FastAPI's in-process test client (one per test module)."""
    with TestClient(create_app()) as c:
        yield c


@pytest.fixture(scope="module")
def live_server_url():
    """``http://127.0.0.1:<free port>`` of a real uvicorn serving the app in a thread of this process."""
    # The socket stays bound and goes to uvicorn: a port found free and bound later can be taken meanwhile.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline, "uvicorn did not start within 30 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()
