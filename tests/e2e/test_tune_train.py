"""tune end to end with the real trainer on 2 CPU processes: killed mid-trial, resumed, its pick validated and
trained. The one real tune of the suite: 2 trials of 4 timed steps."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO

TUNE = ["tune", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain", "--engine",
        "bundled", "--trials", "2", "--steps", "4", "--warmup", "1", "--trial-timeout", "240"]


def env():
    return dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


def cli(*args, cwd, timeout=600):
    return subprocess.run([sys.executable, "-m", "service.cli.app", *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=timeout)


def processes_reading(path: Path) -> list[int]:
    """Pids whose command line names ``path`` (a trial's config: its launcher and workers)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and str(path) in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry))
        except OSError:
            continue
    return found


def wait_until_gone(path: Path, seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while processes_reading(path) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_reading(path)


@pytest.mark.slow
def test_tune_killed_mid_trial_resumes_and_its_pick_validates_and_trains(tmp_path):
    db = str(tmp_path / "runs.sqlite")
    tune = subprocess.Popen([sys.executable, "-m", "service.cli.app", *TUNE, "--db", db], cwd=tmp_path, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in tune.stderr:
        lines.append(line)
        if line.startswith("tune: trial 2/2 running"):
            break
    else:
        pytest.fail("tune never reached its second trial:\n" + "".join(lines))
    second = tmp_path / "tune-tiny-llama-2xcpu" / "trial-02" / "trial.yaml"
    deadline = time.monotonic() + 60
    while not processes_reading(second) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(tune.pid, signal.SIGKILL)  # mid-trial
    tune.wait()
    assert wait_until_gone(second) == [], "the killed tune's trial outlived it"

    resumed = cli(*TUNE, "--db", db, "-o", "best.yaml", "--format", "json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    answer = json.loads(resumed.stdout)
    by_index = {t["index"]: t for t in answer["trials"]}
    assert by_index[1]["from_store"] and not by_index[2]["from_store"]  # only the missing trial ran
    assert all(t["outcome"] == "completed" for t in answer["trials"])
    assert by_index[2]["launch_to_first_timed_step_s"] > 0
    best = tmp_path / "best.yaml"
    assert best.read_text().startswith("# Measured by `recipe-advisor tune`")
    measured = answer["best"]["measured_tokens_per_s_per_gpu"]
    assert f"{measured:,.0f} tokens/s/GPU" in best.read_text().splitlines()[0]

    validated = cli("validate", "best.yaml", "--format", "json", cwd=tmp_path)
    assert validated.returncode == 0, validated.stdout
    assert json.loads(validated.stdout)["summary"]["errors"] == 0

    trained = cli("train", "best.yaml", "--step_scheduler.max_steps", "2", "--checkpoint.enabled", "false",
                  "--checkpoint.checkpoint_dir", str(tmp_path / "run"), "--lr_scheduler.warmup_steps", "1",
                  cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert len((tmp_path / "run" / "training.jsonl").read_text().splitlines()) == 2
