"""`recipe-advisor train CONFIG [--nproc-per-node N] [--a.b v ...]`: launch the bundled trainer.

Checks the config first (torch-free, the trainer's own pre-flight), so a bad config
stops here with one message instead of N worker tracebacks; then runs
``python -m torch.distributed.run --nproc-per-node N --standalone -m trainer CONFIG ...``
and returns its exit code. torch is needed only in the workers.
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import subprocess
import sys
from typing import Optional

HELP = "launch the bundled trainer via torch.distributed.run"
LAUNCHER_FLAGS = ("--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-id")


def _whole_number(minimum: int):
    """An argparse type for a count or rank: 0 is refused rather than read as "not given"."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(
        name, help=HELP, allow_abbrev=False,
        description="Run a config with the bundled trainer under torch.distributed.run. Arguments after "
                    "CONFIG other than the launcher flags are config overrides: --optimizer.lr 1e-4.",
    )
    p.add_argument("config", metavar="CONFIG", help="YAML config (e.g. from `recipe-advisor recommend -o`)")
    p.add_argument("--nproc-per-node", type=_whole_number(1),
                   help="processes (devices) per node; default hardware.gpus_per_node")
    p.add_argument("--nnodes", type=_whole_number(1), default=1, help="nodes; > 1 needs --rdzv-endpoint")
    p.add_argument("--node-rank", type=_whole_number(0), help="this node's rank (multi-node)")
    p.add_argument("--rdzv-endpoint", help="host:port of the c10d rendezvous (multi-node)")
    p.add_argument("--rdzv-id", default="recipe-advisor", help="rendezvous id (multi-node)")
    p.add_argument("--dry-run", action="store_true", help="print the launch command and exit")
    p.set_defaults(func=run, accepts_overrides=True)


def _split(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Launcher flags (both `--flag v` and `--flag=v`) apart from config overrides."""
    parser = argparse.ArgumentParser(prog="recipe-advisor", allow_abbrev=False)
    sub = parser.add_subparsers(dest="command")
    add_parser(sub, "train")
    args, overrides = parser.parse_known_args(["train", *argv])
    return args, overrides


def torchrun_command(config: str, overrides: list[str], *, nproc_per_node: int, nnodes: int = 1,
                     node_rank: Optional[int] = None, rdzv_endpoint: Optional[str] = None,
                     rdzv_id: str = "recipe-advisor", python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
                f"--rdzv-id={rdzv_id}"]
        if node_rank is not None:
            cmd.append(f"--node-rank={node_rank}")
    return cmd + ["-m", "trainer", config, *overrides]


def run(args: argparse.Namespace) -> int:
    argv = [args.config]
    for flag in LAUNCHER_FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            argv += [flag, str(value)]
    if args.dry_run:
        argv.append("--dry-run")
    return run_argv(argv + list(getattr(args, "overrides", [])))


def run_argv(argv: list[str]) -> int:
    """Entry from service.cli: everything after `train`."""
    args, overrides = _split(argv)
    from trainer.launch import load_config, preflight
    from trainer.overrides import ConfigError

    nnodes = args.nnodes
    if nnodes > 1 and not args.rdzv_endpoint:
        print("error: --nnodes > 1 needs --rdzv-endpoint HOST:PORT (the first node's address)", file=sys.stderr)
        return 2
    try:
        _, cfg = load_config(args.config, overrides)
        nproc = cfg.hardware.gpus_per_node if args.nproc_per_node is None else args.nproc_per_node
        preflight(cfg, nproc * nnodes)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cmd = torchrun_command(args.config, overrides, nproc_per_node=nproc, nnodes=nnodes,
                           node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if importlib.util.find_spec("torch") is None:
        print("error: the trainer needs torch; install it with `pip install 'recipe-advisor[train]'`",
              file=sys.stderr)
        return 2
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130
