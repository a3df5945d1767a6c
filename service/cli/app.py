"""`recipe-advisor`: one entry point, one small module per command.

Each command module exposes ``add_parser(subparsers)`` (which sets
``func=run``) and ``run(args) -> int``. Modules are imported lazily so that
``recipe-advisor --help`` and ``validate`` never pay for torch or FastAPI.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for Ctrl-C
_WRITE_FAILURES = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}  # writing stdout to a full or failing disk

# command name -> module that implements it
COMMANDS: dict[str, str] = {
    "validate": "service.cli.validate",
    "plan": "service.cli.plan",
    "recommend": "service.cli.recommend",
    "diff": "service.cli.diff",
    "recipes": "service.cli.browse",
    "models": "service.cli.browse",
    "hardware": "service.cli.browse",
    "serve": "service.cli.serve",
    "train": "service.cli.train",
    "runs": "service.cli.runs",
    "tune": "service.cli.tune",
}

HELP = {
    "validate": "check recipe/config YAML files (folders recurse)",
    "plan": "rank the valid parallel layouts for a model on your hardware",
    "recommend": "a ready config and launch commands for a model, hardware and goal",
    "diff": "classify every changed key between two configs (convergence / execution / benchmark-only)",
    "recipes": "list the bundled recipes",
    "models": "list the bundled model cards",
    "hardware": "list the bundled hardware cards",
    "serve": "run the HTTP service",
    "train": "launch the bundled trainer via torch.distributed.run",
    "runs": "the runs store: list, show, add, compare, delete, export measured runs",
    "tune": "measure the best candidate layouts on your hardware, keep the fastest",
}


def _build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recipe-advisor",
        description="Pick, size, validate and run LLM training recipes before you spend GPU hours.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, module_name in COMMANDS.items():
        if wanted == name:
            module = importlib.import_module(module_name)
            module.add_parser(sub, name)
        else:
            # Only the chosen command's module is imported; the others just show in --help.
            sub.add_parser(name, help=HELP[name], add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _dispatch(list(sys.argv[1:] if argv is None else argv))
        finally:
            sys.stdout.flush()  # a closed pipe shows up here, not as a traceback at interpreter exit
    except BrokenPipeError:
        # The reader left (`recipe-advisor recipes | head -1`): stop quietly, as Unix tools do.
        # Python's documented pattern: point stdout at devnull so the final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as err:
        if err.filename is not None or err.errno not in _WRITE_FAILURES:  # not stdout's: the command's own error
            raise
        # stdout itself cannot be written (`> /dev/full`, a full disk, a quota): one line, not a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"error: cannot write the output: {err.strerror or err}", file=sys.stderr)
        return 2


def _dispatch(argv: list[str]) -> int:
    parser = _build_parser(argv)
    if argv and argv[0] == "train":
        # Everything after the config belongs to the trainer (overrides like --optimizer.lr 1e-4).
        from service.cli import train as cli_train

        try:
            return cli_train.run_argv(argv[1:])
        except KeyboardInterrupt:  # a Ctrl-C before torch.distributed.run takes SIGINT over: nothing started yet
            return EXIT_INTERRUPTED
    args, unknown = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if not argv else 2
    if unknown and not getattr(args, "accepts_overrides", False):
        # The command's own usage, which lists the flags it does take.
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        command = next((commands[word] for word in argv if word in commands), parser)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.overrides = unknown
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
