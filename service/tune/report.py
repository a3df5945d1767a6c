"""What a tune answers: every trial beside its estimate, the fastest measured, and the estimate's pair order."""

from __future__ import annotations

from datetime import datetime, timezone
from itertools import combinations
from typing import Optional

from service.tune.search import TrialResult, TuneResult

MAX_SKIPPED_SHOWN = 6


def pair_order(pairs: list[tuple[float, float]]) -> tuple[int, int]:
    """(pairs of (estimate, measured) layouts the estimate orders as measured, pairs compared); ties are not
    compared."""
    agree = total = 0
    for (est_a, meas_a), (est_b, meas_b) in combinations(pairs, 2):
        estimated, actual = est_a - est_b, meas_a - meas_b
        if estimated == 0 or actual == 0:
            continue
        total += 1
        agree += (estimated > 0) == (actual > 0)
    return agree, total


def pair_agreement(results: list[TrialResult]) -> tuple[int, int]:
    """(pairs of measured trials the estimate orders as measured, pairs compared)."""
    return pair_order([(r.candidate.estimated_tokens_per_s_per_gpu, r.measured) for r in results
                       if r.measured is not None])


def _versus_first(result: TuneResult) -> Optional[str]:
    best, first = result.best, result.first_choice
    if best is None or first is None:
        return None
    if best is first:
        return "the estimate's first choice was the fastest measured"
    if first.measured is None:
        return f"the estimate's first choice ({first.candidate.label}) {first.ending.outcome.replace('_', ' ')}"
    gain = best.measured / first.measured - 1
    return f"{gain:.1%} faster than the estimate's first choice ({first.candidate.label}, {first.measured:,.0f})"


def _spread(m: dict) -> str:
    lo, mid, hi = m.get("step_time_p10_s"), m.get("step_time_s"), m.get("step_time_p90_s")
    if not (lo and mid and hi):
        return ""
    return f"±{(hi - lo) / 2 / mid:.0%}"


def _ordered(result: TuneResult) -> list[TrialResult]:
    failed = [r for r in result.results if r.measured is None]
    return result.measured + failed


def format_text(result: TuneResult) -> str:
    lines = [f"{'#':>3}  {'layout':<46} {'kind':<11} {'estimate':>9} {'measured':>9} {'spread':>6} {'meas/est':>8}  "
             "outcome"]
    for r in _ordered(result):
        est = r.candidate.estimated_tokens_per_s_per_gpu
        measured = f"{r.measured:>9,.0f}" if r.measured else f"{'-':>9}"
        ratio = f"{r.measured / est:>8.2f}" if r.measured else f"{'':>8}"
        outcome = "measured" if r.measured else f"{r.ending.outcome}: {r.ending.detail or ''}".rstrip(": ")
        if r.from_store:
            outcome += " (from the store)"
        lines.append(f"{r.index:>3}  {r.candidate.label:<46} {r.candidate.kind:<11} {est:>9,.0f} {measured} "
                     f"{_spread(r.measurement):>6} {ratio}  {outcome}")
    lines.append("tokens/s per GPU; spread: half the p10-p90 range of the timed step times")
    agree, total = pair_agreement(result.results)
    if total:
        lines.append(f"the estimate orders {agree} of {total} pairs of measured layouts as measured "
                     f"({agree / total:.0%})")
    best = result.best
    if best is None:
        lines.append("no trial was measured: see the outcomes above")
    else:
        lines.append(f"fastest measured: {best.candidate.label}, {best.measured:,.0f} tokens/s/GPU; "
                     f"{_versus_first(result)}")
    lines.append(f"{len(result.results)} trial(s), {sum(r.from_store for r in result.results)} from the store; "
                 f"{result.stop_reason}; {result.wall_s:.0f} s")
    lines += skipped_lines(result.candidates.skipped)
    return "\n".join(lines)


def skipped_lines(skipped: list, limit: int = MAX_SKIPPED_SHOWN) -> list[str]:
    """The layouts not run, with their reasons: the first ``limit`` (--format json lists them all)."""
    if not skipped:
        return []
    lines = ["not run:"] + [f"  {s.label}: {s.reason}" for s in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"  ... and {len(skipped) - limit} more (--format json lists them all)")
    return lines


def trial_dict(r: TrialResult) -> dict:
    return {"index": r.index, "layout": r.candidate.label, "kind": r.candidate.kind, "why": r.candidate.why,
            "estimate_tokens_per_s_per_gpu": round(r.candidate.estimated_tokens_per_s_per_gpu, 1),
            "measured_tokens_per_s_per_gpu": None if r.measured is None else round(r.measured, 1),
            "measurement": {k: v for k, v in r.measurement.items() if k != "loss_curve"},
            "outcome": r.ending.outcome, "detail": r.ending.detail, "from_store": r.from_store,
            "run_id": r.run_id, "log_path": r.log_path,
            "launch_to_first_timed_step_s": None if r.first_step_s is None else round(r.first_step_s, 2),
            "wall_s": None if r.wall_s is None else round(r.wall_s, 2)}


def tune_json(result: TuneResult, output: Optional[str] = None) -> dict:
    agree, total = pair_agreement(result.results)
    best = result.best
    return {"trials": [trial_dict(r) for r in _ordered(result)],
            "best": None if best is None else trial_dict(best),
            "first_choice": None if result.first_choice is None else trial_dict(result.first_choice),
            "versus_first_choice": _versus_first(result),
            "pair_agreement": {"agree": agree, "pairs": total},
            "skipped": [s.to_dict() for s in result.candidates.skipped],
            "stop_reason": result.stop_reason, "wall_s": round(result.wall_s, 1), "output": output}


def measured_config_text(result: TuneResult) -> Optional[str]:
    """The fastest measured config, its first lines saying it was measured and against what."""
    best = result.best
    if best is None:
        return None
    m = best.measurement
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    header = [f"# Measured by `recipe-advisor tune` ({when}): {best.measured:,.0f} tokens/s/GPU, median of "
              f"{m.get('timed_steps', '?')} timed steps, the fastest of {len(result.measured)} measured layouts",
              f"# {_versus_first(result)}; estimated {best.candidate.estimated_tokens_per_s_per_gpu:,.0f}"]
    return "\n".join(header) + "\n" + best.config.text
