"""Fixtures shared by every test folder: the app through the ASGI test client, a real server on loopback, and an
offline Hugging Face cache."""

from __future__ import annotations

import functools
import inspect
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


@pytest.fixture(scope="session", autouse=True)
def _session_runs_store(_runs_dir):
    """Module- and session-scoped fixtures (the e2e `recommend` and `train` runs) start before the per-test store
    below: they get a store of the session's own, never the user's data folder, whose runs would calibrate their
    estimates and change what they plan."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECIPE_ADVISOR_DB", str(_runs_dir / "session-runs.sqlite"))
        yield


@pytest.fixture(scope="module", autouse=True)
def _module_runs_store(_runs_dir):
    """Each module's own store for its module-scoped fixtures: one module's recorded training runs do not
    calibrate the next module's plans."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECIPE_ADVISOR_DB", str(_runs_dir / f"module-runs-{next(_store_numbers)}.sqlite"))
        yield


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


# ---- tiers and order (docs/testing.md) ----------------------------------------------------------------------------
# A test that starts the trainer in processes of its own is a `slow` (multi-process) test, found from its source and
# its fixtures' source, so a new one joins the tier without anyone remembering to mark it.
_LAUNCHES = ("run_trainer(", "run_launcher(", "torch.distributed.run", "launch(2,", "launch(4,", 'cli("train"',
             'main(["train"', "launch_script(", "launch_server.run(", "launch_server.subprocess_run(",
             '"service.cli.app", "train"', "import trainer.launch",
             "service.cli.train import launch", "run.sh")


@functools.lru_cache(maxsize=None)
def _launches_processes(func) -> bool:
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        return False
    return any(launch in source for launch in _LAUNCHES)


def _fixture_defs(item) -> list:
    return [d for defs in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values() for d in defs]


def _starts_processes(item) -> bool:
    funcs = [getattr(item, "function", None)] + [d.func for d in _fixture_defs(item)]
    return any(f is not None and _launches_processes(f) for f in funcs)


def _shared_run(item):
    """The first module-scoped fixture of the test that starts processes: its tests share one xdist group, so that
    one worker trains it once (two workers would train it twice)."""
    return next((d for d in _fixture_defs(item) if d.scope == "module" and _launches_processes(d.func)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark multi-process tests slow (before `-m` deselects) and group the tests of a shared multi-process run,
    then run the slow tests first: under `-n 2 --dist loadgroup` each worker takes the next test (or group) as it
    frees up, so the long ones start at once rather than being the tail that one core runs alone at the end."""
    for item in items:
        if item.get_closest_marker("slow") is None and _starts_processes(item):
            item.add_marker(pytest.mark.slow)
        shared = _shared_run(item)
        if shared is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}.{shared.argname}"))
        if getattr(config.option, "loadgroup", False):
            _group_in_node_id(item)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: collection order otherwise


def _group_in_node_id(item) -> None:
    """What `--dist loadgroup` schedules by: the group after an `@` in the test's id. pytest-xdist 3.8 writes it to
    `item._nodeid`, which pytest 9 no longer reads (the id is `item._id`), so no group held together and every
    worker built each shared fixture itself; this writes it where pytest 9 reads it."""
    marker = item.get_closest_marker("xdist_group")
    if marker is None or not hasattr(item, "_id") or "@" in item.nodeid.rsplit("]", 1)[-1]:
        return
    from _pytest.nodeid import NodeId

    name = marker.args[0] if marker.args else marker.kwargs.get("name", "default")
    item._id = NodeId.parse(f"{item.nodeid}@{name}")
