"""Fixtures shared by every test folder: the app through the ASGI test client, a real server on loopback, and an
offline Hugging Face cache."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn
from fastapi.testclient import TestClient

from service.http.app import create_app


@pytest.fixture(autouse=True)
def _hub_offline(monkeypatch):
    """Every test runs with HF_HUB_OFFLINE=1, as `make test` runs the suite: nothing reaches the Hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def _runs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("runs-stores")


_store_numbers = iter(range(1 << 30))


@pytest.fixture(autouse=True)
def _own_runs_store(monkeypatch, _runs_dir):
    """Each test has its own (not yet created) runs store: `train` records there, not in the user's data folder,
    and `plan` finds no runs unless the test adds them."""
    monkeypatch.setenv("RECIPE_ADVISOR_DB", str(_runs_dir / f"runs-{next(_store_numbers)}.sqlite"))


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


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """HF_HUB_OFFLINE=1 with an empty cache in tmp (constants are read at import, so patch both)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache
