"""`recipe-advisor recommend`: a ready config, its layout and estimates, findings and launch commands.

Exit 0; 2 on unusable input, an impossible request (the message says what would work), or
overrides that make the config fail validation (the findings are printed; nothing is written).
Arguments the parser does not know are config overrides: ``--optimizer.lr 1e-4``.
``-o -`` writes the bare YAML to stdout (for a pipe into ``diff BASE -`` or ``validate -``) and the
summary to stderr; its commands read ``config.yaml``, where the user is told to save it.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path
from typing import Optional

from service.cli.plan import REQUEST_ERRORS, add_request_arguments, report_error, request_from_args
from service.configs.changes import verdict
from service.configs.yamlio import OverrideError, YamlError
from service.estimate.memory import gib_text
from service.plan.provenance import provenance
from service.plan.report import measured_lines
from service.recommend.automodel_emit import EMIT_CHOICES
from service.recommend.recommendation import Recommendation, recommend_for
from trainer.contract.atomic_files import write_atomic

EXIT_OK, EXIT_UNUSABLE = 0, 2
STDOUT = "-"  # `-o -`, as `validate -` and `diff BASE -` read stdin
DEFAULT_CONFIG = "config.yaml"  # the file the commands read when no file is written


_STREAMS = {"/dev/stdout": "stdout", "/dev/fd/1": "stdout", "/proc/self/fd/1": "stdout",
            "/dev/stderr": "stderr", "/dev/fd/2": "stderr", "/proc/self/fd/2": "stderr"}


class PartlyWritten(OSError):
    """The in-place write of ``_save`` failed midway: the file holds part of the new config."""


def _save(path: Path, text: str) -> Optional[str]:
    """The config whole or not at all (a full disk leaves the user's old file), through a symlink to the file
    it names. Written in place: the process's own stderr (stdout is `-o -`, handled by the caller; the shell may
    have sent either to a file, which a replacement would cut off from what is printed next), a device or pipe,
    and, said so in the returned note, a writable file in a folder where no staging file can be made."""
    stream = getattr(sys, _STREAMS[str(path)]) if str(path) in _STREAMS else None  # as redirected now
    if stream is not None:
        stream.write(text)
        stream.flush()
        return None
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return None
    try:
        target = path.resolve() if path.is_symlink() else path
    except RuntimeError:  # Python < 3.13 raises it for a symlink loop
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None
    try:
        write_atomic(target, text)
    except PermissionError:
        if not (target.is_file() and os.access(target, os.W_OK)):
            raise
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as err:
            raise PartlyWritten(err.errno, err.strerror, str(path)) from err
        return f"note: {path} was written in place, not replaced whole: its folder takes no staging file"
    return None


def _holds(path: Path, text: str) -> bool:
    """Whether a regular file holds ``text`` (a device such as /dev/full reads forever: never read one)."""
    if str(path) in _STREAMS or not path.is_file():
        return False
    data = text.encode("utf-8")
    try:
        with open(path, "rb") as fh:
            return fh.read(len(data) + 1) == data
    except OSError:
        return False


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help="a ready config and launch commands for a model, hardware and goal",
                              description="Pick the base recipe (the recommender's decision tree), apply the "
                                          "planner's best layout, keep the convergence contract, validate, and "
                                          "print the launch "
                                          "commands. Extra --a.b v arguments override config keys. Exit 0; 2 on "
                                          "unusable input or an impossible request.")
    add_request_arguments(p)
    p.add_argument("--format", choices=["yaml", "json"], default="yaml",
                   help="yaml: the config (and, with -o, a summary); json: the config, layout, estimates, changes, "
                        "findings and commands (/v1/recommend adds why and other_layouts)")
    p.add_argument("--emit", choices=list(EMIT_CHOICES), default=EMIT_CHOICES[0],
                   help="recipe-advisor: this product's config (default); automodel: a NeMo AutoModel recipe YAML "
                        "and its `automodel FILE --nproc-per-node N` command")
    p.add_argument("-o", "--output", metavar="FILE",
                   help=f"write the config YAML to FILE; - writes it alone to stdout (the summary to stderr; the "
                        f"commands read {DEFAULT_CONFIG}), not with --format json")
    p.set_defaults(func=run, accepts_overrides=True)


def summary_text(rec: Recommendation) -> str:
    row, req = rec.best, rec.plan.request
    lay, mem, t = row.layout, row.memory, row.time
    lines = [f"recipe: {rec.recipe.name if rec.recipe else '(schema defaults)'} -> {rec.model.id} {rec.goal} on "
             f"{req.world_size} x {req.hardware.name} ({rec.engine} engine)"]
    lines += [f"note: {n}" for n in rec.notes]
    lines.append(f"layout: TP {lay.tp} PP {lay.pp} VP {lay.vp or '-'} CP {lay.cp} EP {lay.ep} ETP {lay.etp} "
                 f"DP {row.dp} SP {lay.sp} micro batch {lay.micro_batch_size} x {row.grad_accumulation_steps} "
                 f"accumulation, recompute {lay.recompute}, "
                 + ("sharding full (fsdp2, NeMo AutoModel)" if rec.emit == "automodel"
                    else f"sharding {row.sharding} ({row.strategy})"))
    gib = gib_text  # rounded as the web page rounds the same estimate
    lines.append(f"memory per GPU: {gib(mem.total)} GiB (weights {gib(mem.weights)}, grads {gib(mem.grads)}, optimizer "
                 f"{gib(mem.optimizer)}, activations {gib(mem.activations)}, other {gib(mem.other)}) of "
                 f"{req.hardware.memory_gib:g}")
    lines.append(f"estimate: {t.step_time_s:.2f} s/step, {t.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU {t.mfu:.2f}")
    lines += measured_lines(provenance(rec.plan, row))
    if rec.why_first:
        lines.append(f"this layout is {rec.why_first}")
    if rec.changes:
        lines.append(f"changes from the base recipe ({verdict(rec.changes)}):")
        lines += [f"  [{c.layer}] {c.key}: {c.old!r} -> {c.new!r}" for c in rec.changes]
    lines.append(f"validate: {rec.errors} error(s), "
                 f"{sum(f.severity == 'warning' for f in rec.findings)} warning(s)")
    lines += [f"  {f.code} {f.severity}: {f.message}" for f in rec.findings if f.severity != "info"]
    for name, command in rec.commands.items():
        lines += ["", f"## {name}", command.rstrip()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    overrides = list(getattr(args, "overrides", []) or [])
    # `-o /dev/stdout` is `-o -`: the config alone on stdout, the summary on stderr (else a redirect saves both)
    to_stdout = args.output == STDOUT or _STREAMS.get(args.output or "") == "stdout"
    if to_stdout and args.format == "json":
        # One stream cannot hold both documents; the JSON carries the YAML as config_yaml.
        print(f"error: -o {args.output}: --format json writes its JSON to stdout, where -o {args.output} writes the "
              "config YAML; use one (the JSON holds the YAML as config_yaml, or give -o FILE)", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.output is not None and not args.output.strip():
        print("error: -o: an empty file name (an unset variable in -o \"$OUT\"?); name a file, or - for stdout",
              file=sys.stderr)
        return EXIT_UNUSABLE
    config_path = DEFAULT_CONFIG if to_stdout or not args.output else args.output
    try:
        request = request_from_args(args, overrides)
        rec = recommend_for(request, config_path, emit=args.emit, runs_db=args.db)
    except (*REQUEST_ERRORS, OverrideError) as err:
        return report_error(err)
    except YamlError as err:  # the written YAML is re-read under the file limits: a value beyond them
        print(f"error: the advised config would not read back as a config: {err}; a value given on the command "
              "line (a flag or an override) is beyond what a config holds: give a smaller one. Nothing written",
              file=sys.stderr)
        return EXIT_UNUSABLE
    if rec.errors:  # overrides, or a defect: the advised config itself should validate with 0 errors
        for f in rec.findings:
            if f.severity == "error":
                where = f"line {f.line} of the config" if f.line else "the config"
                print(f"{f.key or where}: {f.code} error: {f.text}", file=sys.stderr)
        cause = "the overrides make the config invalid" if request.overrides else "the advised config does not validate"
        print(f"error: {cause} ({rec.errors} error(s)); nothing written", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.output and not to_stdout:
        try:
            note = _save(Path(args.output), rec.config_yaml)
        except OSError as err:
            # After the rename only the folder's sync can fail: then the new config is in place.
            state = ("written in place, it may hold part of the new config" if isinstance(err, PartlyWritten) else
                     "the new config is in place, but the folder could not be synced"
                     if _holds(Path(args.output), rec.config_yaml) else "the file is as it was")
            print(f"error: cannot write {args.output}: {err.strerror or err} ({state})", file=sys.stderr)
            return EXIT_UNUSABLE
        if note:
            print(note, file=sys.stderr)
    if args.format == "json":
        print(json.dumps(rec.to_dict(), indent=2, default=str))
    elif to_stdout:
        print(rec.config_yaml, end="")
        print(f"note: the config YAML is on stdout; the commands below read it as {DEFAULT_CONFIG}: save it "
              f"there (-o {DEFAULT_CONFIG}, or redirect: -o - > {DEFAULT_CONFIG})", file=sys.stderr)
        print(summary_text(rec), file=sys.stderr)
    elif args.output:
        print(summary_text(rec))
    else:
        print(rec.config_yaml, end="")
        print("\n".join("# " + line if line else "#" for line in summary_text(rec).splitlines()))
    return EXIT_OK
