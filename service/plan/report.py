"""A plan as both doors publish it: the JSON of `plan --format json` and POST /v1/plan, and the text table."""

from __future__ import annotations

from typing import Optional

from service.estimate.memory import gib_text
from service.plan.provenance import plan_calibration, provenance, row_dict
from service.plan.sizing import MAX_GPUS_TRIED, gpus_that_fit
from service.plan.types import Plan


def format_text(result: Plan, top: Optional[int]) -> str:
    """The plan as `plan` prints it: the request, one row per layout (``top`` of them; None: all), why rows do
    not fit, and the rules' rejections."""
    req, hw = result.request, result.request.hardware
    precision = req.fp8_recipe or req.precision
    lines = [f"{req.model.id} on {req.world_size} x {hw.name} ({req.gpus_per_node}/node x {req.num_nodes}), "
             f"{req.goal}, seq {req.seq_length}, global batch {req.global_batch_size}, {precision}"
             f"{', bf16 gradient reduce' if req.grad_reduce_dtype == 'bf16' else ''}, "
             f"{req.engine} engine; {hw.memory_gib:g} GiB per GPU, {result.usable_gib:.1f} usable",
             f"{len(result.fitting)} of {len(result.layouts)} valid layouts fit "
             f"({result.structures} parallel shapes enumerated)"]
    header = (f"{'#':>3} {'TP':>3} {'PP':>3} {'VP':>3} {'CP':>3} {'EP':>4} {'ETP':>3} {'DP':>5} {'mbs':>3} "
              f"{'acc':>5} {'recompute':<9} {'sharding':<9} {'GiB':>7} {'step s':>8} {'tok/s/GPU':>10} {'MFU':>5}")
    lines += ["", header]
    rows = result.layouts if not top else result.layouts[:top]
    for i, row in enumerate(rows, 1):
        lay, t = row.layout, row.time
        lines.append(f"{i:>3} {lay.tp:>3} {lay.pp:>3} {lay.vp or '-':>3} {lay.cp:>3} {lay.ep:>4} {lay.etp:>3} "
                     f"{row.dp:>5} {lay.micro_batch_size:>3} {row.grad_accumulation_steps:>5} {lay.recompute:<9} "
                     f"{row.sharding:<9} {gib_text(row.memory.total):>7} {t.step_time_s:>8.2f} "
                     f"{t.tokens_per_s_per_gpu:>10.0f} {t.mfu:>5.2f}" + ("" if row.fits else "  does not fit")
                     + ("  needs a layout string (RA-L019)" if row.needs_layout_string else ""))
        lines += provenance_lines(provenance(req, row))
        if result.runs is not None:
            lines += own_lines(result.runs.row_fields(row))
    if result.why_first:
        lines += ["", f"row 1 is {result.why_first}"]
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


def provenance_lines(found: dict) -> list[str]:
    """The lines under a row: the index recipes that run its layout, and its newest measurement."""
    lines = []
    if found["used_by"]:
        lines.append("      used by " + ", ".join(f"{use['recipe']} ({use['kind']}, {use['num_gpus']} GPUs)"
                                          for use in found["used_by"]))
    measured = found["measured"]
    if measured:
        release = f"release {measured['release']}, " if measured["release"] else ""
        lines.append(f"      measured {measured['tokens_per_s_per_gpu']:,.0f} tok/s/GPU at global batch "
                     f"{measured['global_batch_size']} ({release}{measured['source']})")
    return lines


def own_lines(fields: dict) -> list[str]:
    """The line under a row for its measurements in the user's runs store, and its calibrated estimate."""
    lines = []
    own = fields["measured_yours"]
    if own:
        lines.append(f"      measured in your runs: {own['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, "
                     f"{own['count']} run(s), spread {own['spread']:.0%}, newest {(own['newest'] or '?')[:10]}")
    elif fields["calibrated_tokens_per_s_per_gpu"] is not None:
        lines.append(f"      calibrated on your runs: {fields['calibrated_tokens_per_s_per_gpu']:,.0f} tok/s/GPU")
    return lines


def plan_json(result: Plan, top: Optional[int]) -> dict:
    """The plan (its ``top`` rows; None: all), the GPU counts that fit when none here does, and notes on the
    estimates."""
    rows = result.layouts if top is None else result.layouts[:top]
    return {**result.to_dict(top=top), "layouts": [row_dict(result, row) for row in rows],
            "gpus_that_fit": gpus_that_fit(result), "notes": result.notes, "calibration": plan_calibration(result)}
