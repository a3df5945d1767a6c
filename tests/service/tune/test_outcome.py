"""A trial's outcome read from recorded logs: memory, collective timeouts, host kills, refusals, crashes."""

from pathlib import Path

import pytest

from service.tune.outcome import classify, last_error_line

LOGS = Path(__file__).parent / "logs"


def log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name, exit_code, outcome, says", [
    ("cuda_oom.txt", 1, "out_of_memory", "CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("cpu_allocator_oom.txt", 1, "out_of_memory", "DefaultCPUAllocator: can't allocate memory"),
    ("host_oom_kill.txt", 1, "out_of_memory", "host memory"),
    ("nccl_watchdog_timeout.txt", 1, "timed_out", "Watchdog caught collective operation timeout"),
    ("c10d_store_timeout.txt", 1, "timed_out", "DistStoreError: Timed out after 901 seconds"),
    ("refused_tp_size.txt", 2, "refused", "tp_size: 3 does not divide the world size 2"),
    ("crashed_value_error.txt", 1, "crashed", "ValueError: Expected input batch_size (8)"),
])
def test_recorded_logs_are_classified(name, exit_code, outcome, says):
    ending = classify(exit_code, log(name))
    assert ending.outcome == outcome
    assert says in ending.detail


def test_memory_is_the_cause_when_the_other_ranks_lose_their_peer():
    # cuda_oom.txt: rank 1 reports the aborted communicator after rank 3 ran out of memory
    assert classify(1, log("cuda_oom.txt")).outcome == "out_of_memory"


def test_a_crash_names_the_failing_rank_not_the_peer_that_lost_it():
    line = last_error_line(log("crashed_value_error.txt"))
    assert line.startswith("ValueError"), line
    assert "Connection closed by peer" not in line


def test_tunes_own_timeout_is_timed_out_whatever_the_log_says():
    ending = classify(None, log("crashed_value_error.txt"), timed_out=True, timeout_s=30)
    assert ending.outcome == "timed_out" and "30 s" in ending.detail


def test_a_clean_exit_is_measured_only_with_timed_steps():
    assert classify(0, "", measured=True).outcome == "completed"
    assert classify(0, "").outcome == "crashed"
