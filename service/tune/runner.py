"""Run one trial: `recipe-advisor train` of a trial config, in its own session, killed whole at its timeout.

torch.distributed.run starts each worker in a session of its own, so killing the launcher's process group
would leave the workers running. At the timeout the runner stops (SIGSTOP) the launcher and every process
below it, looking again until the tree stops growing (a stopped process cannot fork or be re-parented away),
then SIGKILLs them all and waits until none is left. A per-process address-space cap (``memory_cap_bytes``,
RLIMIT_AS, inherited by the workers) makes a layout that needs more memory fail as it would on a full GPU.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol

LOG_FILE = "trial.log"
METRICS_FILE = "training.jsonl"
POLL_S = 0.2
GONE_WAIT_S = 10.0


@dataclass
class TrialSpec:
    config: Path  # the trial's config file (its checkpoint_dir is the trial folder)
    folder: Path
    nproc_per_node: int
    timeout_s: float
    memory_cap_bytes: Optional[int] = None
    env: dict[str, str] = field(default_factory=dict)
    warmup: int = 0  # logged steps before the first timed one

    @property
    def log_path(self) -> Path:
        return self.folder / LOG_FILE

    @property
    def metrics_path(self) -> Path:
        return self.folder / METRICS_FILE


@dataclass
class TrialRun:
    exit_code: Optional[int]
    timed_out: bool
    log: str
    wall_s: float
    first_step_s: Optional[float]  # from launch to the first logged step (None: no step logged)
    command: list[str] = field(default_factory=list)
    first_timed_step_s: Optional[float] = None  # from launch to the end of the first step after the warm-up


class Runner(Protocol):
    def __call__(self, spec: TrialSpec) -> TrialRun: ...


def train_command(spec: TrialSpec) -> list[str]:
    return [sys.executable, "-m", "service.cli", "train", str(spec.config),
            "--nproc-per-node", str(spec.nproc_per_node)]


def _ppids() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process visible in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces and parentheses
        children.setdefault(ppid, []).append(int(entry))
    return children


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children, found, todo = _ppids(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kill_tree(proc: subprocess.Popen) -> list[int]:
    """Stop, then SIGKILL ``proc`` and every process below it (module docstring); the pids it killed."""
    stopped: set[int] = set()
    for _ in range(50):
        tree = set(process_tree(proc.pid)) if proc.poll() is None else set()
        new = tree - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher's own group, in case the tree was not readable
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    deadline = time.monotonic() + GONE_WAIT_S
    while any(_alive(pid) for pid in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)
    return sorted(stopped)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _child_setup(cap: Optional[int]) -> Callable[[], None]:
    """In the launcher, before it starts: it dies with tune (a kill -9 of tune leaves no trial running: its
    workers die with it, trainer.launch.die_with_launcher), and its address space is capped when asked."""

    def preexec() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return preexec


def _steps_logged(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except OSError:
        return 0


def run_trial(spec: TrialSpec, command: Optional[list[str]] = None) -> TrialRun:
    """Launch the trial (``command``, default `recipe-advisor train CONFIG --nproc-per-node N`) and wait for it,
    at most ``spec.timeout_s``; its output goes to ``trial.log`` in the trial folder."""
    command = command or train_command(spec)
    spec.folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env}
    start = time.monotonic()
    first_step = first_timed = None
    timed_out = False
    with open(spec.log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=spec.folder, start_new_session=True,
                                preexec_fn=_child_setup(spec.memory_cap_bytes))
        try:
            while proc.poll() is None:
                elapsed = time.monotonic() - start
                if first_timed is None:
                    logged = _steps_logged(spec.metrics_path)
                    first_step = elapsed if first_step is None and logged else first_step
                    first_timed = elapsed if logged > spec.warmup else None
                if elapsed > spec.timeout_s:
                    timed_out = True
                    kill_tree(proc)
                    break
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C or a kill of tune: nothing of the trial outlives it
            kill_tree(proc)
            raise
    if first_step is None and _steps_logged(spec.metrics_path):
        first_step = time.monotonic() - start
    text = spec.log_path.read_text(encoding="utf-8", errors="replace")
    return TrialRun(exit_code=None if timed_out else proc.returncode, timed_out=timed_out, log=text,
                    wall_s=time.monotonic() - start, first_step_s=first_step, command=command,
                    first_timed_step_s=first_timed)
