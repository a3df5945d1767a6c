"""`recipe-advisor serve`: starts a real uvicorn on loopback and answers; bad flags exit 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from service.cli.app import main
from tests.paths import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("flags", [["--port", "70000"], ["--port", "0"], ["--workers", "0"],
                                   ["--max-header-bytes", "100"], ["--header-timeout", "0"],
                                   ["--header-timeout", "inf"]])
def test_bad_flags_exit_2(capsys, flags):
    assert main(["serve", *flags]) == 2
    assert "recipe-advisor serve" in capsys.readouterr().err


def test_serve_answers_on_loopback():
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli.app", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 30
        body = None
        while time.time() < deadline and body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    body = json.loads(r.read())
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                time.sleep(0.2)
        assert body and body["status"] == "ok" and body["recipes"] > 0
        # Loopback only by default: the socket is bound to 127.0.0.1, not to every interface.
        out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            local_addresses = {line.split()[3] for line in out.stdout.splitlines()}
            assert local_addresses == {f"127.0.0.1:{port}"}
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.mark.parametrize("flags, says", [(["--host", "bad host"], "--host 'bad host' cannot be resolved"),
                                          (["--root-path", "advisor"], "--root-path 'advisor' must start with /")])
def test_serve_names_a_bad_flag_before_starting(capsys, flags, says):
    """Uvicorn's own "Name or service not known" named neither flag nor value."""
    assert main(["serve", *flags]) == 2
    assert says in capsys.readouterr().err
