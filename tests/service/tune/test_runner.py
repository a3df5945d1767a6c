"""The trial runner: a stalled trial is killed with every process below it; a memory cap fails an allocation."""

import os
import sys
from pathlib import Path

from service.tune.outcome import classify
from service.tune.runner import TrialSpec, process_tree, run_trial
from tests import launch_server

PROGRAMS = Path(__file__).parent / "programs"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_stalled_trial_is_killed_with_its_workers_in_other_sessions(tmp_path):
    pids_file = tmp_path / "pids"
    spec = TrialSpec(config=tmp_path / "unused.yaml", folder=tmp_path / "trial", nproc_per_node=2, timeout_s=3)
    run = run_trial(spec, command=[sys.executable, str(PROGRAMS / "stalled_launcher.py"), str(pids_file)])
    assert run.timed_out and run.exit_code is None
    workers = [int(pid) for pid in pids_file.read_text().split()]
    assert len(workers) == 2
    assert not [pid for pid in workers if alive(pid)], "a worker outlived its trial"
    assert classify(run.exit_code, run.log, timed_out=True, timeout_s=3).outcome == "timed_out"
    assert [pid for pid in process_tree(os.getpid()) if pid not in (os.getpid(), launch_server.server_pid())] == []


def test_a_trial_over_its_memory_cap_fails_as_out_of_memory(tmp_path):
    spec = TrialSpec(config=tmp_path / "unused.yaml", folder=tmp_path / "trial", nproc_per_node=1, timeout_s=60,
                     memory_cap_bytes=512 << 20)
    run = run_trial(spec, command=[sys.executable, str(PROGRAMS / "memory_hog.py")])
    assert run.exit_code != 0 and not run.timed_out
    ending = classify(run.exit_code, run.log)
    assert ending.outcome == "out_of_memory", run.log
    assert "MemoryError" in ending.detail


def test_a_trial_under_no_cap_runs_to_its_end(tmp_path):
    spec = TrialSpec(config=tmp_path / "unused.yaml", folder=tmp_path / "trial", nproc_per_node=1, timeout_s=60)
    run = run_trial(spec, command=[sys.executable, "-c", "print('done')"])
    assert (run.exit_code, run.timed_out) == (0, False)
    assert "done" in run.log
