"""The request headers are bounded in size (431) and in the time to send them (408), over real sockets.

The server is uvicorn on 127.0.0.1 with the protocol `recipe-advisor serve` runs; every loop below is
bounded in rounds and seconds, so a server that never answers fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time

import pytest

from service.header_limits import HEADER_TIMEOUT_ENV, MAX_HEADER_BYTES
from service.http.server_protocol import LimitedHttpToolsProtocol
from tests.paths import REPO
from tests.service.http.running_server import running_server

REQUEST_HEAD = b"GET /healthz HTTP/1.1\r\nHost: test\r\n"


def read_answer(client: socket.socket, seconds: float) -> bytes:
    """What the server sends until it closes the connection or ``seconds`` pass."""
    answer, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([client], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            chunk = client.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        answer += chunk
    return answer


@pytest.fixture
def port(monkeypatch):
    monkeypatch.setenv(HEADER_TIMEOUT_ENV, "1")
    with running_server(http=LimitedHttpToolsProtocol) as port:
        yield port


def test_headers_over_the_limit_are_431(port):
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(REQUEST_HEAD + b"X-Padding: ")
    answer = b""
    for _ in range(64):  # up to 1 MiB of one header, 16 KiB at a time, until the server answers
        try:
            client.sendall(b"a" * 16384)
        except (BrokenPipeError, ConnectionResetError):
            break
        if select.select([client], [], [], 0.05)[0]:
            break
    answer = read_answer(client, 5)
    client.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert f"request headers over {MAX_HEADER_BYTES:,} bytes".encode() in answer


def test_headers_under_the_limit_and_a_large_body_are_served(port):
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(REQUEST_HEAD + b"X-Padding: " + b"a" * (MAX_HEADER_BYTES - 1024) + b"\r\nConnection: close\r\n\r\n")
    assert read_answer(client, 5).startswith(b"HTTP/1.1 200 ")
    client.close()
    # The body does not count: 900 KiB of YAML in one go, headers and body in the same chunks.
    body = b"# " + b"x" * (900 * 1024) + b"\nmodel:\n  pretrained_model_name_or_path: llama3-8b\n"
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(b"POST /v1/validate HTTP/1.1\r\nHost: test\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert read_answer(client, 10).startswith(b"HTTP/1.1 200 ")
    client.close()


def test_dripped_headers_are_cut_off_after_the_timeout(port):
    started = time.monotonic()
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(10)]
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)  # connects and sends nothing
    closed_after: dict[int, float] = {}
    for round_ in range(40):  # one header byte per client every 0.1 s, 4 s at most
        for i, client in enumerate(clients):
            if i in closed_after:
                continue
            if select.select([client], [], [], 0)[0]:  # the server answered: read it to the end
                answer = read_answer(client, 2)
                assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
                closed_after[i] = time.monotonic() - started
                continue
            try:
                client.sendall((REQUEST_HEAD if round_ == 0 else b"x"))
            except (BrokenPipeError, ConnectionResetError):
                closed_after[i] = time.monotonic() - started
        if len(closed_after) == len(clients):
            break
        time.sleep(0.1)
    assert read_answer(idle, 3) == b""  # closed without an answer: it never asked anything
    assert select.select([idle], [], [], 0)[0]  # closed, not still waiting (read_answer stops at either)
    for client in [*clients, idle]:
        client.close()
    assert len(closed_after) == len(clients), f"still open after 4 s: {len(clients) - len(closed_after)}"
    assert max(closed_after.values()) < 3  # the timeout is 1 s


def test_a_kept_alive_connection_gets_a_fresh_timeout_for_each_request(port):
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    for _ in range(2):
        client.sendall(REQUEST_HEAD + b"\r\n")
        answer = b""
        while b"}" not in answer:  # /healthz answers one JSON object
            answer += client.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200 ")
        time.sleep(1.5)  # past the header timeout, within uvicorn's keep-alive (5 s)
    client.close()


def test_recipe_advisor_serve_applies_its_header_options():
    """`recipe-advisor serve` (what `make serve` runs) passes its options to every worker's protocol."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop(HEADER_TIMEOUT_ENV, None)
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli.app", "serve", "--port", str(free_port), "--workers", "2",
         "--max-header-bytes", "4096", "--header-timeout", "1", "--log-level", "warning"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "the server did not start in 30 s"
            try:
                client = socket.create_connection(("127.0.0.1", free_port), timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        client.sendall(REQUEST_HEAD + b"X-Padding: " + b"a" * 5000 + b"\r\n\r\n")
        assert read_answer(client, 5).startswith(b"HTTP/1.1 431 ")
        client.close()
        for _ in range(4):  # each worker process: the connections are spread over both
            client = socket.create_connection(("127.0.0.1", free_port), timeout=5)
            client.sendall(REQUEST_HEAD)
            started = time.monotonic()
            assert read_answer(client, 5).startswith(b"HTTP/1.1 408 ")
            assert time.monotonic() - started < 3
            client.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
