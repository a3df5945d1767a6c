"""The multi-process tests' launch server answers as `python -m torch.distributed.run` and `python` would: exit
codes, a failed worker stopping the others, the script's folder on sys.path, the environment, timeouts."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests import launch_server

WORKER = '''
import json, os, sys, time
import helper
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
out = sys.argv[1]
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "helper": helper.NAME, "world": dist.get_world_size(),
               "flag": os.environ.get("LAUNCH_TEST_FLAG"), "cwd": os.getcwd()}, f)
if sys.argv[2] == "fail" and rank == 1:
    os._exit(3)
if sys.argv[2] == "sleep":
    time.sleep(600)
dist.barrier()  # rank 0 waits here for a rank that never comes when rank 1 failed
dist.destroy_process_group()
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    (tmp_path / "helper.py").write_text('NAME = "beside the script"\n')
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def torchrun(script: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAUNCH_TEST_FLAG": "on"}
    return launch_server.run(["--nproc-per-node=2", "--standalone", str(script), *args], torchrun=True,
                             cwd=script.parent, env=env, timeout=timeout)


@pytest.mark.slow
def test_workers_run_the_script_as_python_would(script: Path, tmp_path: Path) -> None:
    done = torchrun(script, str(tmp_path), "ok")
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen == {"argv": [str(tmp_path), "ok"], "helper": "beside the script", "world": 2, "flag": "on",
                        "cwd": str(script.parent)}


@pytest.mark.slow
def test_a_failed_worker_stops_the_other_and_the_launch_exits_1(script: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    done = torchrun(script, str(tmp_path), "fail")
    assert done.returncode == 1 and "ChildFailedError" in done.stderr and "exitcode  : 3" in done.stderr
    assert time.monotonic() - started < 60  # rank 0, blocked in a barrier, was stopped, not waited for


@pytest.mark.slow
def test_a_launch_past_its_timeout_is_stopped_and_reported(script: Path, tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        torchrun(script, str(tmp_path), "sleep", timeout=8)
    assert torchrun(script, str(tmp_path), "ok").returncode == 0  # the server serves the next launch


def test_python_alone_gets_the_exit_code_and_output(tmp_path: Path) -> None:
    done = launch_server.run(["-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"],
                             torchrun=False, cwd=tmp_path, env=dict(os.environ), timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (7, "out\n", "err\n")
