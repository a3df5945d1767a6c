"""A plan as both doors publish it: the JSON of `plan --format json` and POST /v1/plan, and the text table."""

from __future__ import annotations

from typing import Optional

from service.estimate.memory import gib_text
from service.plan.provenance import plan_calibration, provenance, row_dict
from service.plan.shown import ShownRow, shapes, shown_rows, why_first_shown
from service.plan.sizing import MAX_GPUS_TRIED, gpus_that_fit
from service.plan.sources import ESTIMATE, plan_choice
from service.plan.types import Plan, PlannedLayout

DEFAULT_TOP = 10  # rows `plan` shows unless told (--top)


def format_text(result: Plan, top: Optional[int]) -> str:
    """The plan as `plan` prints it: the request, one row per distinct shape (``top`` of them; None: all), the
    candidate source of marked rows, why rows do not fit, and the rules' rejections."""
    req, hw = result.request, result.request.hardware
    precision = req.fp8_recipe or req.precision
    lines = [f"{req.model.id} on {req.world_size} x {hw.name} ({req.gpus_per_node}/node x {req.num_nodes}), "
             f"{req.goal}, seq {req.seq_length}, global batch {req.global_batch_size}, {precision}"
             f"{', bf16 gradient reduce' if req.grad_reduce_dtype == 'bf16' else ''}, "
             f"{req.engine} engine; {hw.memory_gib:g} GiB per GPU, {result.usable_gib:.1f} usable",
             f"{len(result.fitting)} of {len(result.layouts)} valid layouts fit, {len(shapes(result))} distinct "
             f"shapes ({result.structures} parallel structures enumerated); each row is a shape's best variant"]
    header = (f"{'#':>3} {'TP':>3} {'PP':>3} {'VP':>3} {'CP':>3} {'EP':>4} {'ETP':>3} {'DP':>5} {'mbs':>3} "
              f"{'acc':>5} {'recompute':<9} {'sharding':<9} {'GiB':>7} {'step s':>8} {'tok/s/GPU':>10} {'MFU':>5}")
    lines += ["", header]
    shown = shown_rows(result, top or None)
    rows = [s.row for s in shown]
    for i, (row, marked) in enumerate(zip(rows, shown), 1):
        lay, t = row.layout, row.time
        lines.append(f"{i:>3} {lay.tp:>3} {lay.pp:>3} {lay.vp or '-':>3} {lay.cp:>3} {lay.ep:>4} {lay.etp:>3} "
                     f"{row.dp:>5} {lay.micro_batch_size:>3} {row.grad_accumulation_steps:>5} {lay.recompute:<9} "
                     f"{row.sharding:<9} {gib_text(row.memory.total):>7} {t.step_time_s:>8.2f} "
                     f"{t.tokens_per_s_per_gpu:>10.0f} {t.mfu:>5.2f}" + ("" if row.fits else "  does not fit")
                     + ("  needs a layout string (RA-L019)" if row.needs_layout_string else ""))
        lines += source_lines(marked) + provenance_lines(provenance(result, row))
    why = why_first_shown(result, shown)
    if why:
        lines += ["", f"row 1 is {why}"]
    choice = plan_choice(result)
    if choice is not None:
        lines.append(f"layout source: {choice.source.summary}")
    not_fitting = [i for i, r in enumerate(rows, 1) if not r.fits]
    if not_fitting:  # about those rows only: others above may fit
        first = not_fitting[0]
        lines += ["", f"{len(not_fitting)} of the {len(rows)} rows shown are marked \"does not fit\"; "
                      f"row {first}: {result.why_not_fitting(rows[first - 1])}"]
    counts = gpus_that_fit(result)
    if not result.layouts:
        works = f"; {' or '.join(map(str, counts))} GPUs of that type work" if counts else ""
        lines.append(f"no layout on {req.world_size} x {hw.name} passes the rules ({req.engine} engine): "
                     f"see the rejections below{works}")
    elif not result.fitting:
        lines.append(f"nothing fits on {req.world_size} x {hw.name}: " +
                     (f"the fewest GPUs of that type found to fit it: {counts[0]}" if counts
                      else f"no GPU count up to {MAX_GPUS_TRIED} fits"))
    lines += [f"note: {note}" for note in result.notes]
    lines.append(f"estimates calibrated on: {plan_calibration(result)}")
    if result.rejections:
        lines += ["", "rejected by the rules:"]
        for code, (finding, count) in sorted(result.rejections.items()):
            lines.append(f"  {code} x{count}: {finding.message}")
    return "\n".join(lines)


def source_lines(shown: ShownRow) -> list[str]:
    """The lines under a row on where it comes from (a marked row) and the variants folded under it."""
    lines = []
    if shown.source != ESTIMATE:
        rank = (f"estimate rank {shown.estimate_rank}" if shown.estimate_rank else "not in the estimate's ranking")
        lines.append(f"      {shown.source}: {shown.note or shown.recipe} ({rank})")
    if shown.variants:
        lines.append(f"      + {len(shown.variants)} variant(s) of this shape (micro batch, VP, recompute)")
    return lines


def variant_dict(row: PlannedLayout) -> dict:
    """A folded variant: what differs within a shape, and its estimate (none for a variant that does not fit)."""
    lay = row.layout
    return {"vp": lay.vp, "micro_batch_size": lay.micro_batch_size, "grad_accumulation_steps":
            row.grad_accumulation_steps, "recompute": lay.recompute, "sharding": row.sharding, "fits": row.fits,
            "memory_gib": round(row.memory_total_gib, 2),
            "tokens_per_s_per_gpu": None if row.tokens_per_s is None else float(f"{row.tokens_per_s:.6g}")}


def shown_dict(result: Plan, shown: ShownRow) -> dict:
    """A shown row as the answers publish it: the row, its candidate source and the variants folded under it."""
    return {**row_dict(result, shown.row), "layout_source": shown.source, "source_recipe": shown.recipe,
            "source_note": shown.note, "estimate_rank": shown.estimate_rank,
            "variants": [variant_dict(row) for row in shown.variants]}


def provenance_lines(found: dict) -> list[str]:
    """The lines under a row: the index recipes that run its layout, then ``measured_lines``."""
    lines = []
    if found["used_by"]:
        lines.append("      used by " + ", ".join(f"{use['recipe']} ({use['kind']}, {use['num_gpus']} GPUs)"
                                          for use in found["used_by"]))
    return lines + ["      " + line for line in measured_lines(found)]


def measured_lines(found: dict) -> list[str]:
    """What was measured of a row (``provenance``): the newest published measurement, the user's own runs of it,
    or else its estimate calibrated on the user's runs."""
    lines = []
    measured = found["measured"] or {}
    if measured.get("tokens_per_s_per_gpu") is not None:
        release = f"release {measured['release']}, " if measured["release"] else ""
        lines.append(f"measured {measured['tokens_per_s_per_gpu']:,.0f} tok/s/GPU at global batch "
                     f"{measured['global_batch_size']} ({release}{measured['source']})")
    own = measured.get("yours")
    if own:
        lines.append(f"measured in your runs: {own['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, {own['count']} run(s), "
                     f"spread {own['spread']:.0%}, newest {(own['newest'] or '?')[:10]}")
    elif found["calibrated_tokens_per_s_per_gpu"] is not None:
        lines.append(f"calibrated on your runs: {found['calibrated_tokens_per_s_per_gpu']:,.0f} tok/s/GPU")
    return lines


def plan_json(result: Plan, top: Optional[int]) -> dict:
    """The plan (its ``top`` distinct shapes; None: all), the candidate sources' choice, the GPU counts that fit
    when none here does, and notes on the estimates."""
    shown = shown_rows(result, top)
    choice = plan_choice(result)
    return {**result.to_dict(top=0), "layouts": [shown_dict(result, row) for row in shown],
            "why_first": why_first_shown(result, shown),
            "layout_source": None if choice is None else choice.source.to_dict(),
            "gpus_that_fit": gpus_that_fit(result), "notes": result.notes, "calibration": plan_calibration(result)}
