"""`recipe-advisor train CONFIG [--nproc-per-node N] [--a.b v ...]`: launch the bundled trainer.

Checks the config first (torch-free): the trainer's own pre-flight, then the rules of
`recipe-advisor validate` over the config as it will run (file, overrides, launched world).
A bad config stops here with one message per problem instead of N worker tracebacks or a
run that cannot fit; validate's warnings are printed and do not stop it, and
``--ignore-validation-errors`` launches despite its errors. Then it runs
``python -m torch.distributed.run --nproc-per-node N --standalone -m trainer CONFIG ...``
in this process (``--dry-run`` prints that command), and records the run in the runs store when it ends
(service/runs/training.py). Exit codes are the trainer's:
0 done, 2 bad config (found here or by the workers), 1 failure, 128+N stopped by signal N.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

from trainer.contract.text import one_line

HELP = "launch the bundled trainer via torch.distributed.run"
LAUNCHER_FLAGS = ("--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-id")
SWITCHES = ("--dry-run", "--ignore-validation-errors")


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
    p.add_argument("--dry-run", action="store_true", help="check the config, print the launch command and exit")
    p.add_argument("--ignore-validation-errors", action="store_true",
                   help="launch even when `recipe-advisor validate` finds errors in the config (e.g. an "
                        "estimate that does not fit); they are printed as warnings")
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
    argv += [flag for flag in SWITCHES if getattr(args, flag[2:].replace("-", "_"), False)]
    return run_argv(argv + list(getattr(args, "overrides", [])))


def _rendezvous_problem(nnodes: int, node_rank: Optional[int], endpoint: Optional[str]) -> Optional[str]:
    """What torch.distributed.run would refuse, or hang on, after the pre-flight: said before it."""
    if node_rank is not None and node_rank >= nnodes:
        return f"--node-rank {node_rank}: ranks of {nnodes} node(s) run from 0 to {nnodes - 1}"
    if nnodes == 1 and (node_rank or endpoint):  # a standalone launch ignores both
        return "--node-rank and --rdzv-endpoint are for --nnodes > 1; drop them, or give --nnodes"
    if endpoint:
        host, colon, port = endpoint.rpartition(":")
        if colon and (not host or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)):
            return f"--rdzv-endpoint {endpoint!r}: expected HOST[:PORT] with a port from 1 to 65535"
    return None


def run_argv(argv: list[str]) -> int:
    """Entry from service.cli.app: everything after `train`."""
    args, overrides = _split(argv)
    from trainer.contract.checkpoint_dir import check_creatable_dir, check_writable_dir
    from trainer.contract.checkpoint_lock import check_checkpoint_dir_free
    from trainer.contract.overrides import ConfigError
    from trainer.contract.preflight import load_config, preflight
    from trainer.contract.safe_paths import check_links_stay_inside

    misspelt = next((arg.split("=")[0] for arg in overrides
                     if arg.startswith("--") and arg.split("=")[0].replace("_", "-") in LAUNCHER_FLAGS), None)
    if misspelt:  # torchrun's own spelling (--nproc_per_node) would read as a config key
        print(f"error: {misspelt}: a launcher flag is spelt {misspelt.replace('_', '-')} here", file=sys.stderr)
        return 2
    nnodes = args.nnodes
    if nnodes > 1 and not args.rdzv_endpoint:
        print("error: --nnodes > 1 needs --rdzv-endpoint HOST:PORT (the first node's address)", file=sys.stderr)
        return 2
    problem = _rendezvous_problem(nnodes, args.node_rank, args.rdzv_endpoint)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        raw, cfg = load_config(args.config, overrides)
        nproc = cfg.hardware.gpus_per_node if args.nproc_per_node is None else args.nproc_per_node
        resume = preflight(cfg, nproc * nnodes)
        check_trainer_installed()
        check_targets_exist(cfg)
        check_links_stay_inside(Path(cfg.checkpoint.checkpoint_dir))  # the trainer writes there
        if resume is not None:  # every file read as data, before any process starts
            check_checkpoint_is_data(resume)
    except ConfigError as exc:
        print(one_line(f"error: {exc}"), file=sys.stderr)
        return 2
    errors = report_validation(args.config, raw, cfg, overrides, gpus_per_node=nproc, num_nodes=nnodes,
                               ignore_errors=args.ignore_validation_errors)
    if errors:
        print(f"error: `recipe-advisor validate` finds {errors} error(s) in this config; nothing was started. Fix "
              "them, or pass --ignore-validation-errors to launch anyway", file=sys.stderr)
        return 2
    cmd = torchrun_command(args.config, overrides, nproc_per_node=nproc, nnodes=nnodes,
                           node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id)
    if args.dry_run:
        try:  # creates nothing: checks that the folder could be created and written, and that no run holds it
            check_creatable_dir(Path(cfg.checkpoint.checkpoint_dir))
            check_checkpoint_dir_free(Path(cfg.checkpoint.checkpoint_dir))
        except ConfigError as exc:
            print(one_line(f"error: {exc}"), file=sys.stderr)
            return 2
        print(shlex.join(cmd))
        return 0
    try:  # unchecked, the folder would fail only at the first save
        check_writable_dir(Path(cfg.checkpoint.checkpoint_dir))
        # The workers' rank 0 takes the lock for the run; checked here too, so a second run starts nothing.
        check_checkpoint_dir_free(Path(cfg.checkpoint.checkpoint_dir))
    except ConfigError as exc:
        print(one_line(f"error: {exc}"), file=sys.stderr)
        return 2
    code = launch(cmd[3:])
    if args.node_rank in (None, 0):  # one record per run: the first node's
        from service.runs.training import record_training_run

        record_training_run(raw, Path(cfg.checkpoint.checkpoint_dir), code, gpus_per_node=nproc, nodes=nnodes,
                            command=["recipe-advisor", "train", *argv])
    return code


def report_validation(path: str, raw: dict, cfg, overrides: list[str], *, gpus_per_node: int, num_nodes: int,
                      ignore_errors: bool = False) -> int:
    """Print `recipe-advisor validate`'s findings for the config as it will run: the file with the
    overrides applied, judged for the launched world (--nproc-per-node x --nnodes stand for
    hardware.gpus_per_node and hardware.num_nodes). Each line names the rule, where the value comes
    from (file:line or the flag), the key and the fix. Returns the number of errors that stop the
    launch (0 with ``ignore_errors``, which prints them as warnings)."""
    from service.configs.yamlio import Document, YamlError, load_yaml, read_file
    from service.validate.document import unusable_finding, validate_document
    from trainer.contract.dotted import with_dotted
    from trainer.contract.overrides import parse_overrides

    flags = {key: f"--{key}" for key, _ in parse_overrides(overrides)}
    launched = [("hardware.gpus_per_node", gpus_per_node, cfg.hardware.gpus_per_node, "--nproc-per-node"),
                ("hardware.num_nodes", num_nodes, cfg.hardware.num_nodes, "--nnodes")]
    world = [(key, value) for key, value, configured, _ in launched if value != configured]
    flags.update({key: flag for key, value, configured, flag in launched if value != configured})
    try:
        as_written = load_yaml(read_file(path), path)  # for the line numbers
        doc = Document(data=with_dotted(raw, world), positions=as_written.positions,
                       duplicates=as_written.duplicates, path=path)
        findings = validate_document(doc, dialect="recipe-advisor")  # the bundled trainer runs only its own format
    except YamlError as err:  # read by the trainer's loader, refused by validate's (its limits)
        findings = [unusable_finding(err)]
    errors = 0
    for finding in findings:
        where = next((flag for key, flag in flags.items() if finding.key and
                      (finding.key == key or finding.key.startswith(key + "."))), None)
        where = where or (f"{path}:{finding.line}" if finding.line else path)
        label = f"{finding.code} ({where}" + (f", {finding.key})" if finding.key else ")")
        fix = f"; fix: {finding.fix}" if finding.fix else ""
        if finding.severity == "error" and not ignore_errors:
            errors += 1
            print(one_line(f"error: {label}: {finding.message}{fix}"), file=sys.stderr)
        elif finding.severity == "error":
            print(one_line(f"warning: ignored error {label}: {finding.message}{fix}"), file=sys.stderr)
        elif finding.severity == "warning":
            print(one_line(f"warning: {label}: {finding.message}{fix}"), file=sys.stderr)
    return errors


TRAINER_DEPENDENCIES = ("torch", "numpy", "safetensors", "tokenizers", "tqdm")  # pyproject.toml's `train` extra


def check_checkpoint_is_data(checkpoint: Path) -> None:
    """trainer/components/checkpoint_trust.py reads every file of the checkpoint a resume would load, as data, in
    a process of its own: the service imports only the trainer's torch-free contract."""
    from trainer.contract.overrides import ConfigError

    done = subprocess.run([sys.executable, "-m", "trainer.components.checkpoint_trust", str(checkpoint)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit {done.returncode}"
        raise ConfigError(last.removeprefix("error: "))


def check_trainer_installed() -> None:
    """The `train` extra is installed: a serving-only install (`make serve`, the Docker image) has no torch, and
    the `_target_` lookup below would call torch.optim.AdamW unknown instead."""
    from trainer.contract.overrides import ConfigError

    missing = [name for name in TRAINER_DEPENDENCIES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"the trainer's dependencies are not installed here (no {', '.join(missing)}); install "
                          "them with `pip install '.[train]'` in the recipe-advisor folder (fused GPU kernels: "
                          "'.[train,gpu]'), then run train again")


def check_targets_exist(cfg) -> None:
    """Each registered ``_target_`` names something that exists in this install, read from source without
    importing it (the RA-S002 lookup of `validate`); torch.optim.Muon on an older torch would otherwise fail
    in every worker."""
    from service.validate.rules.targets import TargetNotFound, is_registered, signature_of
    from trainer.contract.config import TARGET_SECTIONS
    from trainer.contract.overrides import ConfigError

    for section_name in TARGET_SECTIONS:
        section = getattr(cfg, section_name)
        target = getattr(section, "target", None)
        if not is_registered(section_name, target):
            continue  # absent, or refused by the pre-flight's registry check already
        try:
            signature_of(target)
        except TargetNotFound as exc:
            raise ConfigError(f"{section_name}._target_: {target} cannot be found ({exc}); check the spelling "
                              "of the dotted path") from None
        except (OSError, SyntaxError, ValueError):
            continue  # source unreadable here: the workers import it and report


def _without_death_signals(record: logging.LogRecord) -> bool:
    return "death signal" not in str(record.msg)


def launch(torchrun_args: list[str]) -> int:
    """``torch.distributed.run`` in this process, so a failure becomes an exit code instead of its
    ChildFailedError traceback: 2 when the workers stopped on a config error (they print the message,
    rank 0 once), else 1 with one line per failed rank (each worker printed its own traceback)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # Its "failed (exitcode: N)", "Sending process ... closing signal" and "Received N death signal" lines
    # are replaced by the one-line summaries below.
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    agent_log = logging.getLogger("torch.distributed.elastic.agent.server.api")
    if _without_death_signals not in agent_log.filters:  # once per process, however many launches
        agent_log.addFilter(_without_death_signals)
    outer_launcher = os.environ.get(LAUNCHER_PID_ENV)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # each worker dies with this process (die_with_launcher)
    try:
        run(parse_args(torchrun_args))
    except ChildFailedError as exc:
        return exit_code_of_failures(exc.failures)
    except SignalException as exc:
        print(f"error: stopped by {exc.sigval.name}; the workers were terminated", file=sys.stderr)
        return 128 + int(exc.sigval)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT  # the shell's code for Ctrl-C
    finally:  # a later launch from this process under another torchrun must not name this one
        if outer_launcher is None:
            os.environ.pop(LAUNCHER_PID_ENV, None)
        else:
            os.environ[LAUNCHER_PID_ENV] = outer_launcher
    return 0


EXIT_CONFIG = 2  # trainer.launch.EXIT_CONFIG: the workers found a bad config
LAUNCHER_PID_ENV = "RECIPE_ADVISOR_LAUNCHER_PID"  # trainer.launch.LAUNCHER_PID_ENV
EXIT_INTERRUPTED = 128 + signal.SIGINT  # trainer.launch.EXIT_INTERRUPTED: a worker stopped on SIGINT


def exit_code_of_failures(failures: dict) -> int:
    """2 when every worker that failed exited with the config-error code (the agent SIGTERMs the others
    once one fails); 130 when they stopped on a SIGINT sent to them rather than to this launcher; else 1
    after one line per failed rank."""
    codes = {failure.exitcode for failure in failures.values()}
    if EXIT_CONFIG in codes and codes <= {EXIT_CONFIG, -signal.SIGTERM}:
        return EXIT_CONFIG
    if EXIT_INTERRUPTED in codes and codes <= {EXIT_INTERRUPTED, -signal.SIGTERM, -signal.SIGINT}:
        print("error: the workers were stopped by SIGINT", file=sys.stderr)
        return EXIT_INTERRUPTED
    for rank, failure in sorted(failures.items()):
        if failure.exitcode < 0:
            how = f"was killed by {failure.signal_name()}"
        else:
            how = f"exited with code {failure.exitcode}"
        print(f"error: trainer rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {how}",
              file=sys.stderr)
    return 1
