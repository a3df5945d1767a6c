"""Entry of the bundled trainer: ``python -m trainer CONFIG [--a.b v ...]``.

Runs under an existing ``torchrun`` or Slurm ``srun`` (one process per device), or
alone as one process. Loading the config and the pre-flight checks are torch-free
(trainer/contract/preflight.py, which ``recipe-advisor train`` runs before it spawns
anything), so a bad config stops with one clear message naming the key, before any
process group, model or checkpoint exists.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import IO, Optional

from trainer.contract.checkpoint_dir import check_writable_dir
from trainer.contract.checkpoint_lock import hold_checkpoint_dir
from trainer.contract.overrides import ConfigError
from trainer.contract.preflight import is_rank_zero, load_config, preflight
from trainer.contract.safe_paths import check_links_stay_inside
from trainer.contract.text import one_line

DEFAULT_RECIPE = "trainer.recipes.TrainFinetuneRecipe"
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # the shell's code for Ctrl-C
USAGE = "usage: python -m trainer CONFIG [--section.key VALUE ...]"
_stop_requested = False  # set by the SIGINT handler that main() installs
_leaving = False  # run() has returned: a Ctrl-C now only cuts the exit short
_checkpoint_dir_lock: Optional[IO[str]] = None  # rank 0's, open for the whole run: one writer per folder
LAUNCHER_PID_ENV = "RECIPE_ADVISOR_LAUNCHER_PID"  # set by `recipe-advisor train`, else by trainer/__main__.py
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def launch_world_size() -> int:
    env = os.environ
    if "WORLD_SIZE" in env:
        return int(env["WORLD_SIZE"])
    if "SLURM_NTASKS" in env and "SLURM_PROCID" in env:
        return int(env["SLURM_NTASKS"])
    return 1


def die_with_launcher(env=os.environ) -> None:
    """A worker of torch.distributed.run gets SIGKILL when its launcher dies. The agent starts each worker in a
    session of its own, so a ``kill -9`` of the launcher reached none of them: they trained on, and their
    ``keep_last`` deleted checkpoints under the next run. A launcher that died before the signal was set is seen
    right after: this process has another parent than the one ``recipe-advisor train`` names, or the one it had
    at start-up (trainer/__main__.py). Linux only; alone or under srun, nothing changes."""
    if "TORCHELASTIC_RUN_ID" not in env or not sys.platform.startswith("linux"):
        return
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # refused (a sandbox): the process runs as before
    launcher = env.get(LAUNCHER_PID_ENV, "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(128 + signal.SIGKILL)


def _prepare_checkpoint_dir(folder: Path) -> None:
    """Rank 0: create and probe the folder, then hold its lock until this process ends."""
    global _checkpoint_dir_lock
    check_links_stay_inside(folder)
    check_writable_dir(folder)
    _checkpoint_dir_lock = hold_checkpoint_dir(folder)


def run(argv: list[str]) -> int:
    """Load, check, train. Returns the exit code (0 ok, 2 bad config, 1 failure); never calls exit.

    Once the process group exists, rank 0 creates and probes ``checkpoint.checkpoint_dir`` and takes its lock
    (one run per folder), and every rank stops with exit 2 if it is unusable or in use, before the model is
    built."""
    if not argv or argv[0] in ("-h", "--help") or argv[0].startswith("--"):
        print(USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        raw, cfg = load_config(argv[0], argv[1:])
        preflight(cfg, launch_world_size(), compare_resume=False)
    except ConfigError as exc:
        if is_rank_zero():
            print(one_line(f"error: {exc}"), file=sys.stderr)
        return EXIT_CONFIG

    from trainer.components.targets import resolve_target
    from trainer.distributed.dist import check_on_main, init_distributed, lost_peer

    try:
        info = init_distributed(cfg.distributed.backend)
    except ConfigError as exc:
        if is_rank_zero():
            print(one_line(f"error: {exc}"), file=sys.stderr)
        return EXIT_CONFIG
    try:
        check_on_main(lambda: _prepare_checkpoint_dir(Path(cfg.checkpoint.checkpoint_dir)))
        from trainer.recipes import BaseRecipe

        recipe_cls = resolve_target(cfg.recipe.target or DEFAULT_RECIPE, "recipe")
        if not (isinstance(recipe_cls, type) and issubclass(recipe_cls, BaseRecipe)):
            raise ConfigError(f"recipe._target_: {cfg.recipe.target} is not a recipe class (a BaseRecipe subclass "
                              f"such as {DEFAULT_RECIPE})")
        recipe = recipe_cls(cfg, raw, info)
        recipe.setup()
        recipe.run_train_validation_loop()
        return EXIT_OK
    except ConfigError as exc:
        if info.is_main:
            print(one_line(f"error: {exc}"), file=sys.stderr)
        return EXIT_CONFIG
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # not only Exception: torch.distributed.checkpoint raises a BaseException
        # (CheckpointException), also around a Ctrl-C that lands inside a save
        if _stop_requested:  # a peer left on the same Ctrl-C first, failing this rank's collective
            return EXIT_INTERRUPTED
        reason = lost_peer(exc)
        if reason:  # one line per surviving rank, not a traceback each: the rank that left says why
            print(f"\n[rank {info.rank}] training stopped: another rank left the job ({reason}); its own log, "
                  "or its exit code in the launcher's summary, says why", file=sys.stderr)
            return EXIT_FAILED
        print(f"[rank {info.rank}] training failed:", file=sys.stderr)
        traceback.print_exc()
        return EXIT_FAILED


def _stop(signum, frame) -> None:
    """SIGINT (Ctrl-C, or torch.distributed.run passing it on): stop quietly, once. Further ones are
    ignored so that the exit below is not interrupted into a traceback. Checkpoints stay whole: a save
    is staged, marked complete and renamed into place (trainer/components/checkpoint.py), so one cut short is a
    ``.tmp_`` folder that resume skips. SIGTERM keeps its default (the process ends at once, silently)
    rather than waiting for a collective to return to Python."""
    global _stop_requested
    if _leaving:  # in exit_process: leave as soon as Python runs again (after a barrier returns), no traceback
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    _stop_requested = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: Optional[list[str]] = None) -> None:
    global _leaving
    die_with_launcher()
    signal.signal(signal.SIGINT, _stop)
    try:
        code = run(list(sys.argv[1:] if argv is None else argv))
        _leaving = True  # inside the try: a Ctrl-C just before this line is still caught below
    except KeyboardInterrupt:  # no traceback per rank: the launcher says it once ("stopped by SIGINT")
        code = EXIT_INTERRUPTED  # _stop ignores further Ctrl-Cs from here on
    if "trainer.distributed.dist" not in sys.modules:  # stopped before torch was needed: nothing to tear down
        sys.exit(code)
    from trainer.distributed.dist import exit_process

    exit_process(code, synchronize=code in (EXIT_OK, EXIT_CONFIG), tear_down=code != EXIT_INTERRUPTED)
