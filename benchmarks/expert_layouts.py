"""How often `plan --engine megatron` ranks the expert-tuned layout first.

For every benchmark recipe (kind ``perf_benchmark``) of ../shared/reference/mbridge_recipes.json,
plan with the recipe's own model, GPU count, hardware, sequence length, global batch, goal and
precision, then compare the planner's ranking of distinct (TP, PP, CP, EP) tuples with the
expert's tuple. Reports top-1 and top-5 agreement and the expert layout's rank; writes a
Markdown table for benchmarks/README.md with ``--markdown``.

    .venv/bin/python benchmarks/expert_layouts.py [--markdown] [--verbose] [--sources] [--smoke]

``--sources`` compares the planner's estimate ranking (before) with the rows `plan` shows (after: distinct shapes,
the candidate sources' choice first, then the nearest transferred layouts: service/plan/sources.py), top-1 and top-5,
dense and MoE, leave-one-recipe-out: the recipe being scored is left out of the index for its own request, so it
never transfers to itself (nor counts as tuned for itself). ``--smoke`` scores the first few recipes only.

Recipes whose model has no bundled card are counted as skipped (the planner needs the
architecture). The planner never sees the expert's layout: only the request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipe_index import find_bundled_model, get_hardware  # noqa: E402
from service.plan.planner import make_request, plan  # noqa: E402
from service.plan.shown import shapes, shown_rows  # noqa: E402
from service.plan.sources import CONTRACT_FIELDS, choose, sized_library  # noqa: E402
from service.validate.rules.precision import FP8_RECIPES, precision_of_token  # noqa: E402

# Recipes that contradict themselves at their own GPU count (reference/mbridge_rules.md section 5):
# their expert layout is not a valid layout of the request, so no planner can rank it.
INVALID_AT_OWN_SIZE = ("num_gpus not divisible by PP*EP*ETP", "GBS not divisible by MBS*DP at num_gpus")
# The precision each Bridge token trains in (the step-time benchmark's models take these); `plan` itself
# takes the token, which names the FP8 scaling too (per tensor or per block).
PRECISION = {token: precision_of_token(token) for token in ("bf16", *FP8_RECIPES, "nvfp4")}


def shared_dir() -> Path:
    env = os.environ.get("RECIPE_ADVISOR_SHARED")
    return Path(env) if env else ROOT.parent / "shared"


SMOKE_RECORDS = 3
HELDOUT = ROOT / "benchmarks" / "data" / "heldout_expert_layouts.json"


def scored_records(path: Path) -> list[dict]:
    """The records of a layouts file that are really held out: not the same request as a reference
    benchmark recipe, and not a layout a later release of the same source replaced."""
    return [r for r in json.loads(path.read_text()) if not r.get("in_reference") and not r.get("superseded_by")]


def expert_tuple(r: dict) -> tuple[int, int, int, int]:
    return (r["tensor_model_parallel_size"] or 1, r["pipeline_model_parallel_size"] or 1,
            r["context_parallel_size"] or 1, r["expert_model_parallel_size"] or 1)


def ranked_tuples(p) -> list[tuple[int, int, int, int]]:
    seen: dict[tuple, None] = {}
    for row in p.layouts:
        lay = row.layout
        seen.setdefault((lay.tp, lay.pp, lay.cp, lay.ep), None)
    return list(seen)


def _tuple_of(row) -> tuple[int, int, int, int]:
    lay = row.structure
    return (lay.tp, lay.pp, lay.cp, lay.ep)


def _rank_in(tuples: list[tuple], expert: tuple) -> int | None:
    return tuples.index(expert) + 1 if expert in tuples else None


def source_ranks(p, name: str, expert: tuple) -> dict:
    """The expert tuple's rank among the estimate's rows (each row a variant), the estimate's distinct shapes, and
    the rows `plan` shows (after), with ``name`` (the scored recipe, as the index names it) left out."""
    left_out = frozenset({name, name.removesuffix("_config")})
    rows = [_tuple_of(row) for row in p.layouts]
    estimate_shapes = [_tuple_of(group[0]) for group in shapes(p)]
    choice = None
    if p.best is not None:
        choice = choose(p, sized_library(p, left_out), CONTRACT_FIELDS, left_out)
    p.choice = choice
    shown = [_tuple_of(s.row) for s in shown_rows(p, 5)]
    return {"rows": _rank_in(rows[:5], expert), "estimate_shapes": _rank_in(estimate_shapes[:5], expert),
            "shown": _rank_in(shown, expert), "case": choice.source.case if choice else None}


def evaluate(records: list[dict], grad_reduce_dtype: str = "fp32", sources: bool = False) -> list[dict]:
    """Plan every record; ``grad_reduce_dtype`` is what the requests say (the issue's inputs leave it
    out: fp32, the planner's default; the benchmark recipes themselves reduce in bf16)."""
    results, cache = [], {}
    for r in records:
        card = find_bundled_model(r["model_key"]) or find_bundled_model(r.get("model") or "")
        hw_name = r.get("hardware")
        result = {"name": r["name"], "expert": expert_tuple(r), "status": "skipped", "rank": None, "top": None}
        if card is None or not hw_name or not r.get("num_gpus"):
            result["reason"] = "no bundled model card" if card is None else "no hardware/GPU count"
            results.append(result)
            continue
        if any(flag in INVALID_AT_OWN_SIZE for flag in r.get("consistency_flags") or ()):
            result.update(status="invalid", reason="; ".join(r["consistency_flags"]))
            results.append(result)
            continue
        key = (card.id, hw_name, r["num_gpus"], r["seq_length"], r["global_batch_size"],
               r["precision_token"] if r["precision_token"] in PRECISION else "bf16", r["mode"])
        if key not in cache:
            req = make_request(card, r["num_gpus"], get_hardware(hw_name).name, goal=r["mode"],
                               seq_length=r["seq_length"], global_batch_size=r["global_batch_size"],
                               precision=key[5], engine="megatron", grad_reduce_dtype=grad_reduce_dtype)
            started = time.perf_counter()
            p = plan(req)
            cache[key] = (ranked_tuples(p), time.perf_counter() - started, p)
        tuples, seconds, p = cache[key]
        if sources:
            result["sources"] = source_ranks(p, r["name"], result["expert"])
            result["moe"] = card.is_moe
        rank = tuples.index(result["expert"]) + 1 if result["expert"] in tuples else None
        result.update(status="planned", rank=rank, top=tuples[0] if tuples else None, seconds=seconds,
                      model=card.id, hardware=hw_name, gpus=r["num_gpus"], mode=r["mode"])
        results.append(result)
    return results


def before_after(results: list[dict]) -> str:
    """Top-1 and top-5 of the expert's (TP, PP, CP, EP), dense and MoE: the estimate's rows (each variant a row),
    its distinct shapes, and the rows `plan` shows with the candidate sources (leave-one-recipe-out)."""
    lines = ["| models | requests | estimate rows top-1 / top-5 | estimate shapes top-5 | shown shapes top-1 / "
             "top-5 |", "|---|---|---|---|---|"]
    planned = [r for r in results if r["status"] == "planned" and "sources" in r]
    for label, rows in (("dense", [r for r in planned if not r["moe"]]), ("MoE", [r for r in planned if r["moe"]]),
                        ("all", planned)):
        def count(kind: str, k: int) -> str:
            hits = sum(r["sources"][kind] is not None and r["sources"][kind] <= k for r in rows)
            return f"{hits} ({100 * hits / len(rows):.0f} %)" if rows else "-"
        lines.append(f"| {label} | {len(rows)} | {count('rows', 1)} / {count('rows', 5)} | "
                     f"{count('estimate_shapes', 5)} | {count('shown', 1)} / {count('shown', 5)} |")
    cases = Counter(r["sources"]["case"] for r in planned)
    lines += ["", "first row's source: " + ", ".join(f"{case} {n}" for case, n in sorted(cases.items(), key=str))]
    return "\n".join(lines)


def _top_counts(rows: list[dict]) -> tuple[int, int]:
    """(expert layout ranked first, expert layout in the top 5) over planned results."""
    return (sum(r["rank"] == 1 for r in rows), sum(r["rank"] is not None and r["rank"] <= 5 for r in rows))


def summary(results: list[dict]) -> dict:
    planned = [r for r in results if r["status"] == "planned"]
    n = len(planned)
    top1, top5 = _top_counts(planned)
    return {"recipes": len(results), "planned": n,
            "invalid": sum(r["status"] == "invalid" for r in results),
            "skipped": sum(r["status"] == "skipped" for r in results),
            "top1": top1, "top5": top5, "top1_pct": 100 * top1 / n if n else 0.0,
            "top5_pct": 100 * top5 / n if n else 0.0,
            "not_ranked": sum(r["rank"] is None for r in planned),
            "ranks": Counter(r["rank"] if r["rank"] is None or r["rank"] <= 5 else ">5" for r in planned)}


def _grouped(results: list[dict], key: str) -> list[tuple[str, list[dict], int, int]]:
    """(group, its planned results, top-1, top-5) per value of ``key``, sorted by the value."""
    groups: dict[str, list[dict]] = {}
    for r in results:
        if r["status"] == "planned":
            groups.setdefault(r[key], []).append(r)
    return [(name, rows, *_top_counts(rows)) for name, rows in sorted(groups.items())]


def by_model(results: list[dict]) -> str:
    """Top-1 / top-5 per model, the compact view for benchmarks/README.md."""
    lines = ["| model | recipes | top-1 | top-5 | typical miss (expert -> planner top-1) |", "|---|---|---|---|---|"]
    for model, rows, top1, top5 in _grouped(results, "model"):
        miss = next((f"{r['expert']} -> {r['top']} ({r['hardware']})" for r in rows if r["rank"] != 1), "")
        lines.append(f"| {model} | {len(rows)} | {top1} | {top5} | {miss} |")
    return "\n".join(lines)


def by_hardware(results: list[dict]) -> str:
    """Top-1 / top-5 per hardware type: the overfitting check (ideas fitted on one half of the
    hardware types must hold on the other half)."""
    lines = ["| hardware | recipes | top-1 | top-5 |", "|---|---|---|---|"]
    for hardware, rows, top1, top5 in _grouped(results, "hardware"):
        lines.append(f"| {hardware} | {len(rows)} | {top1} | {top5} |")
    return "\n".join(lines)


def carried_layouts(results: list[dict]) -> list[tuple[dict, list[dict]]]:
    """Misses (expert rank > 5) whose expert tuple is the tuple of a sibling recipe (same model and
    goal, other hardware or GPU count) that the planner does rank in its top 5: a layout the experts
    carried across machines or scales, where a hardware model has to choose differently."""
    planned = [r for r in results if r["status"] == "planned"]
    carried = []
    for r in planned:
        if r["rank"] is not None and r["rank"] <= 5:
            continue
        siblings = [o for o in planned if o["model"] == r["model"] and o["mode"] == r["mode"]
                    and o["expert"] == r["expert"] and (o["hardware"], o["gpus"]) != (r["hardware"], r["gpus"])
                    and o["rank"] is not None and o["rank"] <= 5]
        if siblings:
            carried.append((r, siblings))
    return carried


def carried_markdown(results: list[dict]) -> str:
    misses = sum(r["status"] == "planned" and (r["rank"] is None or r["rank"] > 5) for r in results)
    carried = carried_layouts(results)
    lines = [f"{len(carried)} of {misses} misses carry a sibling's layout:", "",
             "| recipe | expert (TP,PP,CP,EP) | rank here | same tuple, ranked top-5 on |", "|---|---|---|---|"]
    for r, siblings in carried:
        where = ", ".join(sorted({f"{o['gpus']} x {o['hardware']} (rank {o['rank']})" for o in siblings}))
        lines.append(f"| {r['name']} | {r['expert']} | {r['rank']} | {where} |")
    return "\n".join(lines)


def markdown(results: list[dict], s: dict) -> str:
    lines = [f"Recipes: {s['recipes']} benchmark recipes, {s['planned']} planned, {s['skipped']} skipped "
             f"(no bundled model card), {s['invalid']} excluded (their layout is invalid at their own GPU "
             "count: mbridge_rules.md section 5).", "",
             "| top-1 (TP,PP,CP,EP) | top-5 | expert layout not ranked |", "|---|---|---|",
             f"| {s['top1']}/{s['planned']} = {s['top1_pct']:.1f} % | {s['top5']}/{s['planned']} = "
             f"{s['top5_pct']:.1f} % | {s['not_ranked']} |", "",
             "| recipe | expert (TP,PP,CP,EP) | planner top-1 | expert rank |", "|---|---|---|---|"]
    for r in results:
        if r["status"] != "planned":
            continue
        rank = r["rank"] if r["rank"] else "not valid/fitting"
        lines.append(f"| {r['name']} | {r['expert']} | {r['top']} | {rank} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the per-recipe Markdown table")
    parser.add_argument("--verbose", action="store_true", help="list every miss")
    parser.add_argument("--by-model", action="store_true", help="print the per-model Markdown summary")
    parser.add_argument("--by-hardware", action="store_true", help="print the per-hardware Markdown summary")
    parser.add_argument("--carried", action="store_true",
                        help="list the misses whose layout a sibling recipe (other hardware or size) shares")
    parser.add_argument("--records", type=Path, metavar="JSON",
                        help="score these records instead of the reference's benchmark recipes (same keys as "
                             "mbridge_recipes.json; e.g. benchmarks/data/heldout_expert_layouts.json, the "
                             "held-out layouts of other public sources; records marked in_reference are left out)")
    parser.add_argument("--sources", action="store_true",
                        help="before/after: the estimate's ranking vs the rows plan shows with the candidate sources "
                             "(leave-one-recipe-out)")
    parser.add_argument("--smoke", action="store_true", help="score the first few recipes only (a test runs it)")
    parser.add_argument("--recipe-grad-reduce", action="store_true",
                        help="plan with the recipes' own bf16 gradient reduce (grad_reduce_in_fp32=False), "
                             "not the default fp32")
    args = parser.parse_args(argv)
    if args.records:
        bench = scored_records(args.records)
    else:
        records = json.loads((shared_dir() / "reference" / "mbridge_recipes.json").read_text())
        bench = [r for r in records if r["kind"] == "perf_benchmark"]
    if args.smoke:
        bench = bench[:SMOKE_RECORDS]
    started = time.perf_counter()
    results = evaluate(bench, "bf16" if args.recipe_grad_reduce else "fp32", args.sources)
    s = summary(results)
    print(f"planned {s['planned']} of {s['recipes']} benchmark recipes in {time.perf_counter() - started:.1f} s "
          f"({s['skipped']} skipped: no bundled model card; {s['invalid']} excluded: layout invalid at own GPU count)")
    print(f"top-1 {s['top1']}/{s['planned']} = {s['top1_pct']:.1f} %   top-5 {s['top5']}/{s['planned']} = "
          f"{s['top5_pct']:.1f} %   not ranked {s['not_ranked']}")
    print("rank histogram:", dict(s["ranks"]))
    if args.verbose:
        for r in results:
            if r["status"] == "planned" and r["rank"] != 1:
                print(f"  {r['name']}: expert {r['expert']} rank {r['rank']}, planner top {r['top']}")
    if args.by_model:
        print(by_model(results))
    if args.by_hardware:
        print(by_hardware(results))
    if args.carried:
        print(carried_markdown(results))
    if args.sources:
        print(before_after(results))
    if args.markdown:
        print(markdown(results, s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
