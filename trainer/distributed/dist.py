"""Process-group setup and teardown for torchrun, Slurm ``srun`` and plain single-process runs.

Rank and world size come from torchrun's ``RANK/WORLD_SIZE/LOCAL_RANK``, else from
Slurm's ``SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID`` (the rendezvous address is the
first host of the job's node list), else the run is one process on a free local
port. The backend is NCCL with CUDA and gloo without, unless the config says.

Exit: gloo can abort while the interpreter tears down, so a worker finishes with a
barrier (on success), ``destroy_process_group``, a flush, and ``os._exit``.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Callable, Mapping, MutableMapping

import torch
import torch.distributed as dist

from trainer.contract.overrides import ConfigError


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list: ``gpu[07-09,12],cpu01`` -> ``gpu07``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"cannot read the Slurm node list {nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_launch_env(env: MutableMapping[str, str] = os.environ) -> tuple[int, int, int]:
    """(rank, world_size, local_rank); fills ``MASTER_ADDR/PORT`` for Slurm and single-process runs."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if "MASTER_ADDR" not in env:
            if not nodelist:
                raise ConfigError("Slurm run without SLURM_JOB_NODELIST: set MASTER_ADDR to the first node")
            env["MASTER_ADDR"] = first_host(nodelist)
        # A port derived from the job id keeps two jobs sharing a node apart.
        env.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(_free_port()))
    return 0, 1, 0


def pick_backend(requested: str, cuda_available: bool) -> str:
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    if requested == "nccl" and not cuda_available:
        raise ConfigError("distributed.backend: nccl needs CUDA GPUs and none is visible; use gloo or auto")
    return requested


def init_distributed(backend: str = "auto", timeout_s: float = 600.0,
                     env: MutableMapping[str, str] = os.environ) -> DistInfo:
    rank, world_size, local_rank = read_launch_env(env)
    chosen = pick_backend(backend, torch.cuda.is_available())
    if chosen == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(
            backend=chosen, rank=rank, world_size=world_size,
            init_method=f"tcp://{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
            timeout=datetime.timedelta(seconds=timeout_s),
            device_id=device if chosen == "nccl" else None,
        )
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, backend=chosen, device=device)


def is_main_process() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor, group=None) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor


def check_on_main(check: Callable[[], None]) -> None:
    """Run ``check`` on rank 0 only (e.g. probing a shared folder); a ConfigError it raises is raised
    on every rank, so all ranks stop alike instead of the others waiting in a collective."""
    problem = None
    if is_main_process():
        try:
            check()
        except ConfigError as exc:
            problem = str(exc)
    if dist.is_initialized() and dist.get_world_size() > 1:
        shared = [problem]
        dist.broadcast_object_list(shared, src=0)
        problem = shared[0]
    if problem is not None:
        raise ConfigError(problem)


FAULT_ENV = "TRAINER_FAULT_INJECT"


def fault_point(point: str, step: int, rank: int, env: Mapping[str, str] = os.environ) -> None:
    """Crash-test hook: ``TRAINER_FAULT_INJECT=POINT:STEP:RANK`` SIGKILLs that rank there.

    Points: ``after_step`` (after the optimizer step and its log record) and ``during_save``
    (checkpoint files written to staging, not yet published). The resume tests use it to kill
    a worker at a known place; unset, it costs one dict lookup.
    """
    spec = env.get(FAULT_ENV)
    if not spec:
        return
    want_point, want_step, want_rank = (spec.split(":") + ["0"])[:3]
    if want_point == point and int(want_step) == step and int(want_rank) == rank:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


# What a collective raises on a surviving rank when a peer process died (gloo: "Read error ...: Connection
# reset by peer"; NCCL: an aborted communicator or a closed remote socket). The rank that died first says
# why in its own log; the launcher names it.
_LOST_PEER_MARKERS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
                      "remote process exited or there was a network error", "NCCL communicator was aborted")


def lost_peer(exc: BaseException) -> str:
    """How ``exc`` tells this rank that another rank is gone ("" when it is a failure of its own). A
    torch.distributed.checkpoint save or load gathers each rank's exception into its ``failures``."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict):
        for failure in failures.values():
            found = lost_peer(failure[0] if isinstance(failure, tuple) else failure)
            if found:
                return found
        return ""
    if isinstance(exc, getattr(dist, "DistNetworkError", ())):
        return type(exc).__name__
    if not isinstance(exc, RuntimeError):
        return ""
    return next((marker for marker in _LOST_PEER_MARKERS if marker in str(exc)), "")


def exit_process(code: int, synchronize: bool = True, tear_down: bool = True) -> None:
    """Leave without letting interpreter teardown race the process group (gloo aborts otherwise).

    ``synchronize``: wait for every rank first. True after success and after a config error (every
    rank checks the same config and fails alike; without the barrier the launcher may kill rank 0
    before it prints the message). False after a crash, which other ranks may never reach.
    ``tear_down`` False (an interrupted run): leave at once; destroying an NCCL group whose peers are
    stopping may block until the launcher kills the process.
    """
    if dist.is_initialized() and tear_down:
        try:
            if synchronize:
                dist.barrier()
            dist.destroy_process_group()
        except Exception:  # a peer already gone: nothing left to synchronise with
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
