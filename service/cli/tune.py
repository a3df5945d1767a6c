"""`recipe-advisor tune`: measure the best candidate layouts on this machine, keep the fastest (docs/tune.md).

``--engine bundled`` runs each trial here with the bundled trainer; ``--emit-sweep DIR`` writes the trials as a
sweep to run elsewhere (Megatron Bridge, NeMo AutoModel or the bundled trainer on a Slurm cluster) and
``--collect DIR`` reads that sweep's logs back. Exit 0 when a trial was measured (or a sweep written), 1 when
none was, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from service.cli.plan import REQUEST_ERRORS, add_request_arguments, report_error, request_from_args
from service.cli.tune_store import open_store
from service.configs.yamlio import OverrideError

EXIT_OK, EXIT_NONE_MEASURED, EXIT_UNUSABLE = 0, 1, 2


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    return parse


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help="measure the best candidate layouts on your hardware, keep the fastest",
                              description="Run the planner's best candidate layouts for a few steps each with the "
                                          "bundled trainer (mock data), record every trial in the runs store, stop "
                                          "early when nothing beats the best, and write the fastest measured config. "
                                          "Exit 0; 1 when no trial was measured; 2 on unusable input.")
    add_request_arguments(p)
    p.set_defaults(engine="bundled")
    p.add_argument("--trials", type=_positive(int), default=8, help="at most this many trials (default 8)")
    p.add_argument("--steps", type=_positive(int), default=30, help="timed steps per trial (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="steps run before the timed ones, not timed (default 5)")
    p.add_argument("--trial-timeout", type=_positive(float), default=300.0,
                   help="seconds a trial may take before it is killed with its whole process tree (default 300)")
    p.add_argument("--budget-minutes", type=_positive(float), help="stop starting trials after this many minutes")
    p.add_argument("--patience", type=_positive(int), default=3,
                   help="stop after this many trials in a row none beating the best by --min-gain (default 3)")
    p.add_argument("--min-gain", type=float, default=0.02, help="what counts as beating the best (default 0.02)")
    p.add_argument("--memory-cap-gib", type=_positive(float),
                   help="cap each trial process's address space (RLIMIT_AS): a layout that needs more fails as "
                        "out of memory, as on a smaller GPU")
    p.add_argument("--workdir", help="folder of the trial folders (default tune-<model>-<N>x<gpu>)")
    p.add_argument("--no-store", action="store_true", help="neither reuse nor record trials")
    p.add_argument("--emit-sweep", metavar="DIR",
                   help="write the trials as a sweep to run elsewhere (configs, torchrun commands, a Slurm array) "
                        "instead of running them")
    p.add_argument("--collect", metavar="DIR", help="read back the logs of a sweep written by --emit-sweep")
    p.add_argument("--emit", choices=["recipe-advisor", "automodel"], default="recipe-advisor",
                   help="with --emit-sweep / --collect: automodel writes NeMo AutoModel recipes")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("-o", "--output", metavar="FILE", help="write the fastest measured config to FILE")
    p.set_defaults(func=run, accepts_overrides=True)


def _workdir(args: argparse.Namespace, request) -> Path:
    if args.workdir:
        return Path(args.workdir)
    return Path(f"tune-{request.model.id}-{request.world_size}x{request.hardware.name}")


def _check_args(args: argparse.Namespace) -> Optional[str]:
    if args.emit_sweep and args.collect:
        return "--emit-sweep and --collect: give one (write a sweep, then collect it after it ran)"
    if args.engine == "megatron" and not (args.emit_sweep or args.collect):
        return ("--engine megatron: tune does not launch Megatron Bridge here; write the sweep with --emit-sweep DIR, "
                "run it on your cluster, then read it back with --collect DIR")
    if args.emit == "automodel" and not (args.emit_sweep or args.collect):
        return ("--emit automodel: tune runs NeMo AutoModel trials only as a sweep; add --emit-sweep DIR (and read it "
                "back with --collect DIR)")
    if args.warmup < 0:
        return f"--warmup: must be 0 or more, got {args.warmup}"
    if args.output is not None and not args.output.strip():
        return "-o: an empty file name; name a file"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_UNUSABLE
    from service.recommend.layout_source import choose_layout
    from service.recommend.recommendation import prepare
    from service.tune.candidates import select_candidates

    overrides = list(getattr(args, "overrides", []) or [])
    try:
        request = request_from_args(args, overrides)
        prepared = prepare(request, read_runs=False)
    except (*REQUEST_ERRORS, OverrideError) as err:
        return report_error(err)
    first, source = choose_layout(prepared.result, prepared.recipe, prepared.given)
    compiled = None
    if prepared.engine == "bundled":
        from service.runs.bundled import dotted
        from service.tune.trials import candidate_config

        compiled = bool(dotted(candidate_config(prepared, _first_candidate(first, source)).config, "compile.enabled"))
    candidates = select_candidates(prepared.result, first, source.summary, compiled=compiled)
    if args.emit_sweep or args.collect:
        from service.cli.tune_sweep import run_sweep

        return run_sweep(args, prepared, candidates)
    return _tune_here(args, prepared, candidates)


def _first_candidate(first, source):
    from service.tune.candidates import RECOMMENDED, Candidate

    return Candidate(first, RECOMMENDED, source.summary)


def _tune_here(args: argparse.Namespace, prepared, candidates) -> int:
    from service.runs.store import StoreError
    from service.tune.report import format_text, measured_config_text, tune_json
    from service.tune.search import TuneOptions, Tuner

    options = TuneOptions(trials=args.trials, steps=args.steps, warmup=args.warmup,
                          trial_timeout_s=args.trial_timeout,
                          budget_s=None if args.budget_minutes is None else args.budget_minutes * 60,
                          patience=args.patience, min_gain=args.min_gain, workdir=_workdir(args, prepared.request),
                          memory_cap_bytes=None if args.memory_cap_gib is None else int(args.memory_cap_gib * 2**30))
    try:
        store = open_store(args)
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        result = Tuner(prepared, candidates, options, store=store,
                       progress=lambda line: print(f"tune: {line}", file=sys.stderr, flush=True)).run()
    finally:
        if store is not None:
            store.close()
    written = None
    text = measured_config_text(result) if args.output else None  # renders the winner's config and commands
    if args.output and text is not None:
        from service.cli.recommend import _save

        try:
            _save(Path(args.output), text)
        except OSError as err:
            print(f"error: cannot write {args.output}: {err.strerror or err}", file=sys.stderr)
            return EXIT_UNUSABLE
        written = args.output
    elif args.output:
        print(f"note: no trial was measured; {args.output} was not written", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(tune_json(result, written), indent=2, default=str))
    else:
        print(format_text(result))
        if written:
            print(f"wrote the fastest measured config to {written}")
    return EXIT_OK if result.best is not None else EXIT_NONE_MEASURED
