"""`recipe-advisor runs list|show|add|compare|delete|export`: the runs store from the command line.

    runs add RUN_DIR [--config CFG]                 a bundled trainer's run folder (training.jsonl)
    runs add --megatron-log LOG [--config CFG]      a Megatron-LM / Megatron Bridge log
    runs add --automodel-log JSONL --config CFG     NeMo AutoModel's training.jsonl and its recipe
    runs add --json FILE                            runs as `runs export` writes them (a list or one run)
    runs add --published                            NVIDIA's published rows, as runs of source "published"

Exit 0; 2 on unusable input (a bad file names its line) or an unknown run id. ``--db`` (or RECIPE_ADVISOR_DB)
names the store; the default is a SQLite file in the user's data folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from service.runs.schema import OUTCOMES, RunRecord

EXIT_OK, EXIT_UNUSABLE = 0, 2
LIST_FILTERS = ("model", "gpu_type", "engine", "team", "cluster", "outcome", "source", "release")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="URL", help="SQLite path or postgresql+psycopg:// URL (default RECIPE_ADVISOR_DB, "
                   "else the user's data folder)")
    p.add_argument("--format", choices=["text", "json"], default="text")


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help="the runs store: list, show, add, compare, delete, export runs",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="runs, newest first")
    _common(listing)
    for key in LIST_FILTERS:
        listing.add_argument(f"--{key.replace('_', '-')}", dest=key)
    listing.add_argument("--limit", type=int, default=50, help="runs to show (default 50; 0: all)")
    show = sub.add_parser("show", help="one run in full")
    _common(show)
    show.add_argument("id", type=int)
    add = sub.add_parser("add", help="record a run from a run folder, a log or JSON")
    _common(add)
    add.add_argument("run_dir", nargs="?", type=Path, metavar="RUN_DIR", help="a bundled run's checkpoint_dir")
    kinds = add.add_mutually_exclusive_group()
    kinds.add_argument("--megatron-log", type=Path, metavar="LOG")
    kinds.add_argument("--automodel-log", type=Path, metavar="JSONL")
    kinds.add_argument("--json", type=Path, metavar="FILE", dest="json_file")
    kinds.add_argument("--published", action="store_true", help="load NVIDIA's published throughput rows")
    add.add_argument("--config", type=Path, metavar="CFG", help="the config the run was launched with")
    add.add_argument("--model", help="the model (a Megatron log whose shape fits several bundled models)")
    add.add_argument("--gpu-type", help="the GPU type (a Megatron log does not print it)")
    add.add_argument("--gpus-per-node", type=int)
    add.add_argument("--nodes", type=int)
    add.add_argument("--outcome", choices=OUTCOMES, help="how the run ended (default: read from the log)")
    add.add_argument("--release", help="container or release tag (nemo:25.09, Bridge 26.02): calibration groups by it")
    add.add_argument("--cluster", help="a label for the cluster (default RECIPE_ADVISOR_CLUSTER)")
    add.add_argument("--team", help="a team label (default RECIPE_ADVISOR_TEAM)")
    compare = sub.add_parser("compare", help="runs side by side: layout, measured, estimated")
    _common(compare)
    compare.add_argument("ids", type=int, nargs="+")
    delete = sub.add_parser("delete", help="remove runs")
    _common(delete)
    delete.add_argument("ids", type=int, nargs="+")
    export = sub.add_parser("export", help="every run as JSON")
    _common(export)
    export.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")
    p.set_defaults(func=run)


def _layout_text(r: RunRecord) -> str:
    lay = r.layout
    parts = [f"tp{lay.tp}", f"pp{lay.pp}"] + ([f"vp{lay.vp}"] if lay.vp else []) + [f"cp{lay.cp}", f"ep{lay.ep}",
                                                                                   f"dp{lay.dp}",
                                                                                   f"mbs{lay.micro_batch_size}"]
    return " ".join(parts) + f" {lay.recompute}/{lay.sharding}"


def _number(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def list_text(runs: list[RunRecord]) -> str:
    header = (f"{'id':>5} {'recorded':<10} {'model':<16} {'GPUs':<10} {'engine':<9} {'layout':<42} {'step s':>9} "
              f"{'tok/s/GPU':>10} {'est.':>10} {'outcome':<13} cluster/team")
    lines = [header]
    for r in runs:
        m, q = r.measurement, r.request
        when = r.recorded_at.strftime("%Y-%m-%d") if r.recorded_at else "-"
        label = "/".join(x for x in (r.provenance.cluster, r.provenance.team) if x) or "-"
        if r.provenance.source == "published":
            label = f"published ({r.provenance.release or '?'})"
        lines.append(f"{r.id:>5} {when:<10} {q.model[:16]:<16} {f'{q.world_size} {q.gpu_type}'[:10]:<10} "
                     f"{r.provenance.engine:<9} {_layout_text(r)[:42]:<42} {_number(m.step_time_s, '9.4g')} "
                     f"{_number(r.measured_tokens_per_s_per_gpu, '10.0f')} "
                     f"{_number(m.estimate_tokens_per_s_per_gpu, '10.0f')} {r.outcome:<13} {label}")
    return "\n".join(lines)


def compare_rows(runs: list[RunRecord]) -> list[dict]:
    """Each run with its measured over estimated throughput (1.2: 20 % faster than estimated)."""
    rows = []
    for r in runs:
        measured, estimated = r.measured_tokens_per_s_per_gpu, r.measurement.estimate_tokens_per_s_per_gpu
        rows.append({"id": r.id, "model": r.request.model, "gpu_type": r.request.gpu_type,
                     "world_size": r.request.world_size, "engine": r.provenance.engine, "layout": _layout_text(r),
                     "step_time_s": r.measurement.step_time_s, "tokens_per_s_per_gpu": measured,
                     "estimate_tokens_per_s_per_gpu": estimated,
                     "measured_over_estimate": round(measured / estimated, 4) if measured and estimated else None,
                     "peak_mem_gib": r.measurement.peak_mem_gib, "loss_last": r.measurement.loss_last,
                     "outcome": r.outcome, "source": r.provenance.source, "release": r.provenance.release})
    return rows


def compare_text(rows: list[dict]) -> str:
    fastest = max((row["tokens_per_s_per_gpu"] or 0.0) for row in rows) or None
    lines = [f"{'id':>5} {'layout':<42} {'step s':>9} {'tok/s/GPU':>10} {'vs best':>8} {'est.':>10} "
             f"{'meas/est':>8} {'GiB':>7} outcome"]
    for row in rows:
        speed = row["tokens_per_s_per_gpu"]
        versus = f"{speed / fastest:8.2f}" if speed and fastest else f"{'-':>8}"
        lines.append(f"{row['id']:>5} {row['layout'][:42]:<42} {_number(row['step_time_s'], '9.4g')} "
                     f"{_number(speed, '10.0f')} {versus} {_number(row['estimate_tokens_per_s_per_gpu'], '10.0f')} "
                     f"{_number(row['measured_over_estimate'], '8.2f')} {_number(row['peak_mem_gib'], '7.1f')} "
                     f"{row['outcome']}")
    return "\n".join(lines)


def _records_to_add(args: argparse.Namespace) -> list[RunRecord]:
    from service.runs import ingest
    from service.runs.errors import RunInputError

    provenance = {k: v for k, v in {**ingest.labels(args.cluster, args.team), "release": args.release}.items() if v}
    if args.published:
        from service.runs.published import published_records

        return list(published_records())
    if args.json_file is not None:
        return ingest.from_json(args.json_file)
    if args.megatron_log is not None:
        return [ingest.from_megatron_log(args.megatron_log, config=args.config, model=args.model,
                                         gpu_type=args.gpu_type, gpus_per_node=args.gpus_per_node,
                                         outcome=args.outcome, provenance=provenance)]
    if args.automodel_log is not None:
        if args.config is None:
            raise RunInputError("--config", "an AutoModel metrics file needs the recipe it ran",
                                "pass --config RECIPE.yaml")
        return [ingest.from_run_dir(args.automodel_log, config=args.config, engine="automodel",
                                    outcome=args.outcome or "completed", gpus_per_node=args.gpus_per_node,
                                    nodes=args.nodes, provenance=provenance)]
    if args.run_dir is None:
        raise RunInputError("RUN_DIR", "nothing to add", "give a run folder, --megatron-log, --automodel-log, "
                            "--json or --published")
    return [ingest.from_run_dir(args.run_dir, config=args.config, outcome=args.outcome or "completed",
                                gpus_per_node=args.gpus_per_node, nodes=args.nodes, provenance=provenance)]


def _add(store, args: argparse.Namespace) -> int:
    records = _records_to_add(args)
    results = [(store.add(record), record) for record in records]
    if args.format == "json":
        print(json.dumps([{"id": run_id, "created": created} for (run_id, created), _ in results], indent=1))
    else:
        created = sum(c for (_, c), _ in results)
        for (run_id, was_new), record in results[:20]:
            note = "" if was_new else " (already stored)"
            print(f"run {run_id}: {record.request.model} on {record.request.world_size} x {record.request.gpu_type}, "
                  f"{_layout_text(record)}, {record.outcome}{note}")
        print(f"{created} of {len(results)} run(s) added to {store.display_url}")
    return EXIT_OK


def _runs_by_id(store, ids: list[int]) -> list[RunRecord]:
    from service.runs.errors import RunInputError

    runs = []
    for run_id in ids:
        found = store.get(run_id)
        if found is None:
            raise RunInputError("id", f"no run {run_id} in {store.display_url}", "`recipe-advisor runs list` "
                                "shows the ids")
        runs.append(found)
    return runs


def _act(store, args: argparse.Namespace) -> int:
    action = args.runs_command
    if action == "add":
        return _add(store, args)
    if action == "list":
        filters = {key: getattr(args, key) for key in LIST_FILTERS}
        runs = store.query(limit=args.limit or None, **filters)
        print(json.dumps([r.model_dump(mode="json") for r in runs], indent=1) if args.format == "json"
              else list_text(runs))
    elif action == "show":
        (run,) = _runs_by_id(store, [args.id])
        print(run.model_dump_json(indent=1) if args.format == "json" else show_text(run))
    elif action == "compare":
        rows = compare_rows(_runs_by_id(store, args.ids))
        print(json.dumps(rows, indent=1) if args.format == "json" else compare_text(rows))
    elif action == "delete":
        _runs_by_id(store, args.ids)  # all exist, or nothing is deleted
        for run_id in args.ids:
            store.delete(run_id)
        print(f"deleted {len(args.ids)} run(s)")
    elif action == "export":
        text = store.export_json()
        if args.output is not None:
            args.output.write_text(text + "\n", encoding="utf-8")
            print(f"wrote {store.count()} run(s) to {args.output}", file=sys.stderr)
        else:
            print(text)
    return EXIT_OK


def show_text(run: RunRecord) -> str:
    data = run.model_dump(mode="json", exclude={"config_text": True, "measurement": {"loss_curve"}})
    lines = [f"run {run.id}: {run.request.model} on {run.request.world_size} x {run.request.gpu_type} "
             f"({run.provenance.engine}), {_layout_text(run)}, {run.outcome}"]
    for section in ("provenance", "request", "layout", "measurement", "reproduce"):
        values = {k: v for k, v in data[section].items() if v not in (None, {}, [])}
        lines.append(f"  {section}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    lines.append(f"  config: {'sha256 ' + run.config_hash if run.config_hash else 'none stored'}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from service.runs.errors import RunInputError
    from service.runs.store import RunsStore, StoreError

    try:
        with RunsStore(args.db) as store:
            return _act(store, args)
    except RunInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
