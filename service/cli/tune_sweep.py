"""`recipe-advisor tune --emit-sweep DIR` and `--collect DIR`: a tune run elsewhere (service.tune.sweep)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from service.tune.outcome import Ending
from service.tune.search import TrialResult, TuneResult

EXIT_OK, EXIT_NONE_MEASURED, EXIT_UNUSABLE = 0, 1, 2


def sweep_engine(args: argparse.Namespace, prepared) -> str:
    return "automodel" if args.emit == "automodel" else prepared.engine


def run_sweep(args: argparse.Namespace, prepared, candidates) -> int:
    if args.emit_sweep:
        return _emit(args, prepared, candidates)
    return _collect(args, prepared, candidates)


def _emit(args: argparse.Namespace, prepared, candidates) -> int:
    from service.tune.report import skipped_lines
    from service.tune.sweep import sweep_trials, write_sweep

    engine = sweep_engine(args, prepared)
    trials, skipped = sweep_trials(prepared, candidates, engine, trials=args.trials, steps=args.steps,
                                   warmup=args.warmup)
    if not trials:
        print(f"error: no candidate layout runs with {engine}: " + "; ".join(s.reason for s in skipped[:3]),
              file=sys.stderr)
        return EXIT_UNUSABLE
    folder = Path(args.emit_sweep)
    manifest = write_sweep(folder, prepared, trials, engine, steps=args.steps, warmup=args.warmup)
    not_run = skipped + candidates.skipped
    if args.format == "json":
        print(json.dumps({**manifest, "folder": str(folder), "skipped": [s.to_dict() for s in not_run]}, indent=2))
        return EXIT_OK
    for entry in manifest["trials"]:
        print(f"{entry['index']:>3}  {entry['layout']:<46} {entry['kind']:<11} "
              f"{entry['estimate_tokens_per_s_per_gpu']:>9,.0f}  {entry['command']}")
    where = " from your Megatron-Bridge checkout (MEGATRON_BRIDGE_DIR)" if engine == "megatron" else ""
    print(f"wrote {len(trials)} {engine} trial(s) to {folder}: run them with `bash {folder}/commands.sh`{where}, or "
          f"`cd {folder} && sbatch sweep.sbatch`; then `recipe-advisor tune ... --collect {folder}`")
    print("\n".join(skipped_lines(not_run)))
    return EXIT_OK


def _collect(args: argparse.Namespace, prepared, candidates) -> int:
    from service.cli.tune_store import open_store
    from service.runs.ingest import prepared as prepared_record
    from service.runs.store import StoreError
    from service.tune.report import format_text, measured_config_text, tune_json
    from service.tune.sweep import collect_trial, read_manifest
    from service.tune.trials import candidate_config

    folder = Path(args.collect)
    try:
        manifest = read_manifest(folder)
    except (FileNotFoundError, json.JSONDecodeError) as err:
        print(f"error: --collect: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    by_label = {c.label: c for c in candidates.trials}
    unknown = [e["layout"] for e in manifest["trials"] if e["layout"] not in by_label]
    if unknown or manifest["model"] != prepared.request.model.id:
        print(f"error: --collect {folder}: the sweep was written for {manifest['model']} on "
              f"{manifest['gpus_per_node']} x {manifest['gpu_type']} ({manifest['engine']}); give tune the same "
              "request it was written for", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        store = open_store(args)
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    results, pending = [], 0
    emit = "automodel" if manifest["engine"] == "automodel" else "recipe-advisor"
    try:
        for entry in manifest["trials"]:
            record = collect_trial(folder, manifest, entry)
            if record is None:
                pending += 1
                continue
            candidate = by_label[entry["layout"]]
            run_id = store.add(prepared_record(record))[0] if store is not None else None
            measurement = record.measurement.model_dump()
            measurement["tokens_per_s_per_gpu"] = record.measured_tokens_per_s_per_gpu
            outcome = "completed" if record.outcome == "completed" and measurement["tokens_per_s_per_gpu"] else (
                record.outcome)
            results.append(TrialResult(entry["index"], candidate, candidate_config(prepared, candidate, emit=emit),
                                       Ending(outcome, record.outcome_detail), measurement,
                                       log_path=record.reproduce.log_path, run_id=run_id))
    finally:
        if store is not None:
            store.close()
    result = TuneResult(candidates, results, f"collected {len(results)} of {len(manifest['trials'])} trials"
                        + (f", {pending} not run yet (no log)" if pending else ""), 0.0)
    text = measured_config_text(result)
    if args.output and text is not None:
        from service.cli.recommend import _save

        _save(Path(args.output), text)
    if args.format == "json":
        print(json.dumps(tune_json(result, args.output if text else None), indent=2, default=str))
    else:
        print(format_text(result))
    return EXIT_OK if result.best is not None else EXIT_NONE_MEASURED
