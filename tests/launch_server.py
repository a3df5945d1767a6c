"""`torch.distributed.run` and `python -m ...` for the multi-process tests, from an interpreter that has imported
torch and the trainer once.

A launch from a fresh interpreter spends most of a tiny test run importing: on the 2-core box the launcher and
its two workers take 7 s and 10 CPU-seconds before the first step, of a 9 s, 8-step run. This server imports
torch, the trainer and torch's elastic agent once per pytest process, then forks one child per launch, which
runs torch.distributed.run's own command line (`torch.distributed.run.main`: its argument parsing, standalone
rendezvous, elastic agent, worker environment, sessions, failure handling and exit code) with one change: where
the agent would start `python -u -m ...` it gets a fork of this interpreter that runs the module or script as
`python` would (`runpy`, as `__main__`). The workers are real processes in a real gloo process group; what
differs from a shell's torchrun is only the interpreter start-up.

Tests that signal the launcher or read what the shell's torchrun prints start it themselves (`subprocess`).

Protocol (one launch at a time; JSON lines): the client writes {"argv", "torchrun", "cwd", "env", "stdout",
"stderr"}; the server answers {"pid"} once the launch's child exists and {"returncode"} when it has ended.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Optional

from tests.paths import REPO

# What a launch imports, imported once here; a child inherits it.
PRELOAD = ("torch", "torch.distributed.run", "torch.distributed.fsdp", "torch.distributed.tensor.parallel",
           "torch.distributed.pipelining", "torch.distributed.checkpoint", "safetensors.torch", "trainer.launch",
           "trainer.recipes.train_ft")
TERMINATE_GRACE_S = 45  # torch.distributed.run waits up to 30 s for its workers after a SIGTERM
_real_subprocess_run = subprocess.run  # subprocess_run's way for commands that are not `python ...`


# ---- in the server -------------------------------------------------------------------------------------------------

def _python_command(args) -> Optional[list[str]]:
    """The interpreter arguments of ``args`` when it runs this interpreter as `python [-u] (-m MOD | -c CODE |
    SCRIPT) ...` does; None for anything else (another program, other interpreter options)."""
    if isinstance(args, (str, bytes)) or not args or os.fspath(args[0]) != sys.executable:
        return None
    rest = [os.fspath(a) for a in args[1:]]
    while rest and rest[0] == "-u":
        rest.pop(0)
    if rest and (rest[0] in ("-m", "-c") and len(rest) > 1 or not rest[0].startswith("-")):
        return rest
    return None


def _python_main(*python_args: str) -> None:
    """`python -m MODULE ARGS`, `python -c CODE ARGS` or `python SCRIPT ARGS` in this process, as `__main__`."""
    args = _python_command([sys.executable, *python_args])
    if args[0] == "-m":  # sys.path[0] as the interpreter sets it: the working folder, '' or the script's folder
        sys.path[0] = os.getcwd()
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.path[0] = ""
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


class ForkedPython(subprocess.Popen):
    """`subprocess.Popen`, but a command that runs this interpreter (`_python_command`) gets a fork of it running
    the command (`_python_main`) instead of a new interpreter: the same pid, exit status, signals, environment,
    working folder, session, standard streams and pipes as the exec'd one, without the imports."""

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest):
        if shell or executable is not None or preexec_fn is not None or _python_command(args) is None:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                                           creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread,
                                           errwrite, *rest)
        start_new_session = rest[5]  # (restore_signals, gid, gids, uid, umask, start_new_session, ...)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            self.pid, self._child_created = pid, True
            for fd in (p2cread, c2pwrite, errwrite):
                if fd != -1:
                    os.close(fd)
            return
        def start() -> None:
            _signals_as_exec_leaves_them()
            for fd, target in ((0, p2cread), (1, c2pwrite), (2, errwrite)):
                if target != -1:
                    os.dup2(target, fd)
            for fd in (p2cwrite, c2pread, errread):  # the parent's ends: an exec'd child would not hold them
                if fd != -1:
                    os.close(fd)
            if start_new_session:
                os.setsid()
            if cwd is not None:
                os.chdir(cwd)
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
            _python_main(*args[1:])

        _exit_after(start)


def _signals_as_exec_leaves_them() -> None:
    """The signal handlers a new interpreter starts with: exec resets every caught signal to its default (a Python
    handler inherited from the agent would never run while a worker blocks in a collective, so a SIGTERM would not
    stop it), and Python then turns SIGINT into KeyboardInterrupt."""
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        handler = signal.getsignal(number)
        if callable(handler):
            signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _forked_pythons() -> None:
    """In a launch: every `python ...` it starts through subprocess (torch.distributed.run's agent its workers,
    `recipe-advisor train` its checkpoint check) is a ForkedPython."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    subprocess.Popen = subprocess_handler.Popen = ForkedPython


def _exit_after(main: Callable[[], None]) -> None:
    """Run ``main`` in a forked child and leave with the status the interpreter would: 0, sys.exit's code, or 1
    with the traceback of an uncaught exception. Never returns."""
    code = 1
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _exit_code(value) -> int:
    """The interpreter's exit status for `sys.exit(value)`."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _child(request: dict, channel: int) -> None:
    """The launch: never returns."""

    def launch() -> None:
        os.close(channel)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _signals_as_exec_leaves_them()
        _forked_pythons()
        if request["torchrun"]:
            import torch.distributed.run as torchrun

            torchrun.main(request["argv"])
        else:
            _python_main(*request["argv"])

    _exit_after(launch)


def serve() -> None:
    channel_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what an import or a warning prints must not reach the channel
    for name in PRELOAD:
        __import__(name)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, channel_out.fileno())
        channel_out.write(json.dumps({"pid": pid}) + "\n")
        channel_out.flush()
        _, status = os.waitpid(pid, 0)
        channel_out.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        channel_out.flush()


# ---- in the test process -------------------------------------------------------------------------------------------

class LaunchServer:
    """The server process of this pytest process, started on first use."""

    def __init__(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.launch_server"], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _answer(self, key: str, deadline: Optional[float]) -> Optional[int]:
        """The next answer's value, or None when the deadline passed first."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                if selector.select(left):
                    line = self.proc.stdout.readline()
                    if not line:
                        raise RuntimeError("the launch server ended; its stderr is in the test output")
                    return json.loads(line)[key]

    def run(self, argv: list[str], torchrun: bool, cwd: Path, env: dict, timeout: float) -> tuple[int, str, str]:
        with self.lock, tempfile.TemporaryDirectory(prefix="launch-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"argv": argv, "torchrun": torchrun, "cwd": str(cwd), "env": env, "stdout": str(out),
                       "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self._answer("pid", None)
            code = self._answer("returncode", time.monotonic() + timeout)
            if code is None:  # as a shell's Ctrl-C would: the launcher stops its workers, else it is killed
                os.kill(pid, signal.SIGTERM)
                if self._answer("returncode", time.monotonic() + TERMINATE_GRACE_S) is None:
                    os.kill(pid, signal.SIGKILL)
                    self._answer("returncode", None)
                raise subprocess.TimeoutExpired(argv, timeout, out.read_text(errors="replace"),
                                                err.read_text(errors="replace"))
            return code, out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_server: Optional[LaunchServer] = None


def _the_server() -> LaunchServer:
    global _server
    if _server is None or not _server.alive():
        _server = LaunchServer()
        atexit.register(_server.close)
    return _server


def server_pid() -> Optional[int]:
    """This pytest process's launch server, when one runs: a child of this process that no test started."""
    return _server.proc.pid if _server is not None and _server.alive() else None


def run(argv: list[str], *, torchrun: bool, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run ARGV` (torchrun) or `python ARGV`, as `subprocess.run(..., text=True,
    capture_output=True)` would answer, started from the server."""
    code, out, err = _the_server().run(list(argv), torchrun, cwd, dict(env), timeout)
    prefix = [sys.executable, "-m", "torch.distributed.run"] if torchrun else [sys.executable]
    return subprocess.CompletedProcess(prefix + list(argv), code, out, err)


def subprocess_run(cmd, *, cwd=None, env=None, timeout: Optional[float] = None,
                   **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True, ...)` for a script or benchmark that launches
    `python ...` itself: a python command runs from the server, anything else as subprocess.run runs it."""
    args = _python_command(cmd)
    if args is None:
        return _real_subprocess_run(cmd, cwd=cwd, env=env, timeout=timeout, **kwargs)
    torchrun = args[:2] == ["-m", "torch.distributed.run"]
    return run(args[2:] if torchrun else args, torchrun=torchrun, cwd=Path(cwd or os.getcwd()),
               env=dict(os.environ if env is None else env), timeout=3600 if timeout is None else timeout)


if __name__ == "__main__":
    serve()
