"""The figures of a GPU benchmark call, one line each, from the JSON files it left (run.sh's last step).

    python benchmarks/gpu/summary.py OUT_DIR
    python benchmarks/gpu/summary.py --smoke     # the committed H200 results (the suite runs it)

Standard library only, so that it reports even when the trainer's packages failed to install.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPORTS = ("dense-bf16", "moe-bf16", "dense-fp8")
COMMITTED = Path(__file__).resolve().parent / "results" / "h200"


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def summary_lines(out_dir: Path) -> list[str]:
    lines = []
    kernels = _read(out_dir / "kernel_check.json")
    if kernels:
        failed = [f"{r['op']}/{r['kernels']}" for r in kernels["results"] if not r["ok"]]
        lines.append(f"kernel checks: {len(kernels['results']) - len(failed)} of {len(kernels['results'])} ok"
                     + (f"; FAILED {', '.join(failed)}" if failed else ""))
    else:
        lines.append("kernel checks: no result")
    for name in REPORTS:
        report = _read(out_dir / f"{name}.json")
        if report is None:
            continue
        lines.append(f"{name}: {_figures(report)}")
    lines += _pair_lines(out_dir)
    rows = _read(out_dir / "throughput_rows.json")
    lines.append(f"rows for recipe_index/data/published_throughput.json: {len(rows) if rows else 0} in "
                 f"{out_dir / 'throughput_rows.json'}")
    return lines


def _figures(r: dict) -> str:
    est = r.get("planner") or {}
    if not r.get("tokens_per_s"):
        return f"no timed step ({r.get('stopped_by') or 'cut off'})"
    text = f"{r['tokens_per_s']:,.0f} tokens/s"
    if est:
        text += f" (estimate {est['tokens_per_s_per_gpu']:,.0f})"
    if r.get("mfu") is not None:
        estimated = est.get("mfu_at_trainer_flops")
        text += f", MFU {r['mfu']:.1%}" + (f" (estimate {estimated:.1%})" if estimated else "")
    if r.get("peak_allocated_gib") is not None:
        text += f", peak {r['peak_allocated_gib']:.1f} GiB allocated"
        if r.get("peak_reserved_gib") is not None:
            text += f" / {r['peak_reserved_gib']:.1f} reserved"
        if est:
            text += f" (estimate {est['memory_gib']['total']:.1f})"
    text += f", {r['steps_timed']} timed steps"
    if not r.get("complete"):
        text += f", INCOMPLETE ({r.get('stopped_by') or 'cut off'})"
    return text


# (ours, the peer or reference beside it, what the line calls it): the ratio of their tokens/s is the figure.
PAIRS = (("dense-bf16", "peer-torchtitan", "torchtitan's model + parallelize under a minimal loop"),
         ("moe-bf16", "hf-moe", "transformers"))


def _pair_lines(out_dir: Path) -> list[str]:
    lines = []
    for ours_name, peer_name, label in PAIRS:
        ours, peer = _read(out_dir / f"{ours_name}.json"), _read(out_dir / f"{peer_name}.json")
        if peer is None:
            continue
        if not peer.get("tokens_per_s"):
            lines.append(f"{peer_name} ({label}): no timed step")
            continue
        text = f"{peer_name} ({label}): {peer['tokens_per_s']:,.0f} tokens/s"
        if peer.get("mfu") is not None:
            text += f", MFU {peer['mfu']:.1%}"
        if peer.get("peak_allocated_gib") is not None:
            text += f", peak {peer['peak_allocated_gib']:.1f} GiB allocated"
        if ours and ours.get("tokens_per_s"):
            text += f"; ours / {peer_name}: {ours['tokens_per_s'] / peer['tokens_per_s']:.2f}x tokens/s"
            if ours.get("peak_allocated_gib") and peer.get("peak_allocated_gib"):
                text += f", {ours['peak_allocated_gib'] / peer['peak_allocated_gib']:.2f}x peak memory"
        lines.append(text)
    profile = (_read(out_dir / "dense-profile.json") or {}).get("profile")
    if profile and profile.get("wall"):
        parts = ", ".join(f"{k} {v / profile['wall']:.0%}" for k, v in profile.items() if k not in ("wall", "steps"))
        lines.append(f"dense-profile ({profile.get('steps', '?')} steps, {profile['wall']:.2f} s): {parts}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, nargs="?", help="the folder of the call's JSON files")
    parser.add_argument("--smoke", action="store_true", help=f"summarise {COMMITTED.relative_to(COMMITTED.parents[2])}")
    args = parser.parse_args(argv)
    if args.out_dir is None and not args.smoke:
        parser.error("name OUT_DIR (or --smoke)")
    for line in summary_lines(args.out_dir or COMMITTED):
        print(line)


if __name__ == "__main__":
    main()
