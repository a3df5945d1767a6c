"""How a trial ended, read from its exit code and its log (the launcher's and the workers' output together).

Outcomes are the runs store's: ``completed`` (measured), ``out_of_memory``, ``timed_out``, ``crashed``,
``refused`` (before launch: `recipe-advisor train`'s pre-flight or validate stopped it, nothing started).
The markers are the messages torch, NCCL and the kernel print, in the order they are tested: a memory failure
often surfaces on the other ranks as a lost peer or a collective timeout, so memory is looked for first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

EXIT_CONFIG = 2  # `recipe-advisor train`: bad config, found before launch or by the workers
MAX_DETAIL = 400

# torch's CUDA caching allocator (torch.OutOfMemoryError "CUDA out of memory. Tried to allocate ..."), ROCm's,
# cuBLAS / cuDNN failing to get workspace, NCCL's own allocation failure, and the host side: the CPU allocator
# ("DefaultCPUAllocator: can't allocate memory"), C++'s std::bad_alloc, Python's MemoryError, mmap/ENOMEM.
_MEMORY = re.compile(r"CUDA out of memory|HIP out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|"
                     r"CUDNN_STATUS_ALLOC_FAILED|NCCL WARN .*(?:alloc|Cuda failure 2)|ncclSystemError.*alloc|"
                     r"DefaultCPUAllocator: can't allocate memory|std::bad_alloc|\bMemoryError\b|"
                     r"Cannot allocate memory|failed to allocate", re.IGNORECASE)
# A worker SIGKILLed by someone else than tune: on a training host, the kernel's OOM killer ("Killed",
# torchrun's "exitcode: -9", `recipe-advisor train`'s "was killed by SIGKILL", dmesg's "oom-kill").
_HOST_KILL = re.compile(r"was killed by SIGKILL|exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\)|oom[-_ ]kill|"
                        r"Out of memory: Killed process|^Killed$", re.IGNORECASE | re.MULTILINE)
# NCCL's watchdog ("Watchdog caught collective operation timeout: WorkNCCL(...) ran for 600000 milliseconds"),
# the c10d store and rendezvous ("DistStoreError: Timed out after ... seconds waiting for clients", "Socket
# Timeout"), gloo's "Timed out waiting ... for recv operation".
_COLLECTIVE_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|collective operation timeout|"
                                 r"DistStoreError: Timed out|Socket Timeout|RendezvousTimeoutError|"
                                 r"NCCL (?:communicator|watchdog).*time(?:d )?out|ProcessGroupNCCL.*[Tt]imeout|"
                                 r"gloo.*Timed out|c10d.*timed out|DistNetworkError.*timed out", re.IGNORECASE)
# Lines that are noise, not the error: the launcher's own summaries and tracebacks' frames.
_ERROR_LINE = re.compile(r"(?:^|\s)(?:\w+\.)*\w*(?:Error|Exception)\b[:\s]|^error: |^RuntimeError|^\[rank\d+\]:.*Error")
# What a surviving rank says when a peer died: the peer's own line is the cause (trainer.distributed.dist).
_LOST_PEER = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|remote process exited|"
                        r"NCCL communicator was aborted")
_NOISE = re.compile(r"^\s*(?:File \"|Traceback|\^|~)|ChildFailedError|error: trainer rank \d+|"
                    r"error: `recipe-advisor validate` finds|warning:")


@dataclass(frozen=True)
class Ending:
    outcome: str  # completed | out_of_memory | timed_out | crashed | refused
    detail: Optional[str] = None

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "detail": self.detail}


def _matching_line(log: str, pattern: re.Pattern) -> Optional[str]:
    for line in log.splitlines():
        if pattern.search(line):
            return _clip(line.strip())
    return None


def _clip(line: str) -> str:
    line = re.sub(r"^\[rank\d+\]:\s*", "", line)
    return line if len(line) <= MAX_DETAIL else line[:MAX_DETAIL - 3] + "..."


def last_error_line(log: str) -> Optional[str]:
    """The last line that states an error (an exception's message, an ``error:`` line), else the last line."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR_LINE.search(line.strip()) and not _NOISE.search(line)]
    causes = [line for line in errors if not _LOST_PEER.search(line)] or errors
    if causes:
        return _clip(causes[-1].strip())
    return _clip(lines[-1].strip()) if lines else None


def refused_before_launch(log: str) -> bool:
    """`recipe-advisor train` stopped at its pre-flight or validate: it says so and started no worker."""
    return ("nothing was started" in log or ("error:" in log and "torch.distributed" not in log
                                              and "[rank" not in log and "train:" not in log))


def classify(exit_code: Optional[int], log: str, *, timed_out: bool = False, timeout_s: Optional[float] = None,
             measured: bool = False) -> Ending:
    """The outcome of one trial. ``timed_out``: tune killed it at its timeout; ``measured``: it exited 0 and its
    metrics hold timed steps."""
    if timed_out:
        after = f" after {timeout_s:g} s" if timeout_s is not None else ""
        return Ending("timed_out", f"killed{after} with its whole process tree (stalled or too slow)")
    if exit_code == 0 and measured:
        return Ending("completed")
    memory = _matching_line(log, _MEMORY)
    if memory:
        return Ending("out_of_memory", memory)
    collective = _matching_line(log, _COLLECTIVE_TIMEOUT)
    if collective:
        return Ending("timed_out", f"collective timeout: {collective}")
    if exit_code == EXIT_CONFIG and refused_before_launch(log):
        first = next((line.strip() for line in log.splitlines() if line.startswith("error:")), None)
        return Ending("refused", _clip(first) if first else "train refused the config before launch")
    host_kill = _matching_line(log, _HOST_KILL)
    if host_kill:
        return Ending("out_of_memory", f"host memory: a worker was SIGKILLed, as the kernel's OOM killer does "
                                       f"({host_kill})")
    if exit_code == 0:
        return Ending("crashed", "it exited 0 but logged no timed step (raise --steps above --warmup)")
    return Ending("crashed", last_error_line(log) or f"exit code {exit_code}")
