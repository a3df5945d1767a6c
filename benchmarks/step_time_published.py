"""Step-time estimates against NVIDIA's published training throughput.

``recipe_index/data/published_throughput.json`` holds the tokens/s per GPU (or step time) that the
Megatron Bridge and NeMo performance summaries and the dgxc-benchmarking READMEs publish for one
layout each. For every record whose model has a bundled card, this script estimates the published
layout exactly as printed (TP, PP, VP, CP, EP, ETP, micro batch, Megatron-FSDP) with the planner's
step-time model and compares. Recompute is not printed: the estimate takes the least recompute that
the memory model fits, as the planner does. Gradients are reduced in bf16, as Bridge's benchmark
configs set (``grad_reduce_in_fp32=False`` in ``_benchmark_common()``).

Two figures come out:

* **Absolute error**: estimate / measurement, per model kind and hardware.
* **Pair order**: for two layouts of the same request (model, hardware, GPUs, sequence, global batch,
  precision) measured more than 5 % apart, whether the model says which is faster. This is what the
  planner's ranking needs; the pairs come from different releases, which also differ in software.

    .venv/bin/python benchmarks/step_time_published.py [--verbose] [--split-release 26.02]

``--split-release R`` is the out-of-sample check of the MoE factor (``MOE_MEASURED_STEP_FACTOR``):
fitted on the MoE records of releases up to R (and those without a release), how close it brings the
later releases' records.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipe_index import find_bundled_model, get_hardware  # noqa: E402
from recipe_index.measurements import PUBLISHED, UNSCORED_VARIANTS, measured_tokens_per_s, release_order  # noqa: E402
from service.estimate import constants as C  # noqa: E402
from service.estimate.memory import MemoryModel, model_shape, usable_memory_gib  # noqa: E402
from service.estimate.steptime import StepTimeModel  # noqa: E402
from service.facts import Layout  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from expert_layouts import PRECISION  # noqa: E402  (the published precision tokens, as the layout benchmark reads them)

DATA = PUBLISHED


def scorable(r: dict) -> bool:
    if r.get("variant") in UNSCORED_VARIANTS or not r.get("hardware") or measured_tokens_per_s(r) is None:
        return False
    if find_bundled_model(r["model"]) is None:
        return False
    n, tp, pp, cp, ep, etp = r["num_gpus"], r["tp"], r["pp"], r["cp"], r["ep"], r.get("etp") or 1
    if n % (tp * pp * cp) or n % (pp * ep * etp):
        return False
    dp = n // (tp * pp * cp)
    return r["global_batch_size"] % (r["micro_batch_size"] * dp) == 0


def estimate(r: dict) -> tuple[float, str, float]:
    """(tokens/s per GPU, recompute, memory GiB) of the published layout. A row may name its ``engine``
    (the bundled trainer's own measurements, benchmarks/gpu: "bundled"), ``grad_reduce_dtype``, ``compile`` and
    ``recompute``; NVIDIA's rows name none: Megatron, bf16 reduction, the least recompute that fits."""
    card = find_bundled_model(r["model"])
    hw = get_hardware(r["hardware"])
    shape = model_shape(card)
    precision = PRECISION[r["precision_token"]]
    n, seq, gbs = r["num_gpus"], r["seq_length"], r["global_batch_size"]
    peft = r["mode"] == "peft"
    engine, reduce_dtype = r.get("engine", "megatron"), r.get("grad_reduce_dtype", "bf16")
    time_model = StepTimeModel(shape, hw, world_size=n, seq_length=seq, global_batch_size=gbs,
                               precision=precision, engine=engine, grad_reduce_dtype=reduce_dtype, peft=peft,
                               compiled=bool(r.get("compile")))
    memory = MemoryModel(shape, world_size=n, seq_length=seq, engine=engine, peft=peft, cpu=False,
                         precision=precision, grad_reduce_dtype=reduce_dtype)
    tp, pp, cp, ep, etp, mbs = r["tp"], r["pp"], r["cp"], r["ep"], r.get("etp") or 1, r["micro_batch_size"]
    vp = r.get("vp") if (r.get("vp") or 1) > 1 else None
    sharding = "full" if r.get("fsdp") else "optimizer"
    microbatches = gbs // (mbs * (n // (tp * pp * cp)))
    usable = usable_memory_gib(hw.memory_gib)
    chosen = None
    for recompute in (r["recompute"],) if r.get("recompute") else ("none", "selective", "full"):
        layout = Layout(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, sp=tp > 1, micro_batch_size=mbs,
                        recompute=recompute)
        total = memory.estimate(layout, sharding, microbatches).total
        step = time_model.step_seconds(layout, sharding)
        if chosen is None or total <= usable:
            chosen = (time_model.tokens_per_s_per_gpu(step), recompute, total)
        if total <= usable:
            break
    return chosen


def request_key(r: dict) -> tuple:
    """What the planner is asked, with the printed precision (FP8-CS and FP8-MX differ in speed)."""
    return (r["model"], r["mode"], r["hardware"], r["num_gpus"], r["seq_length"], r["global_batch_size"],
            r["precision_token"])


def layout_key(r: dict) -> tuple:
    return (r["tp"], r["pp"], r.get("vp") or 1, r["cp"], r["ep"], r.get("etp") or 1, r["micro_batch_size"],
            bool(r.get("fsdp")))


def pair_order(rows: list[dict], min_gap: float = 0.05) -> tuple[int, int, int]:
    """(agreeing, total, of them in one release) over pairs of different layouts of one request whose
    measurements differ by more than ``min_gap`` (closer ones are within run-to-run noise). Pairs from
    different releases also differ in software, so they are weak evidence either way."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[request_key(row["r"])].append(row)
    agree = total = same_release = 0
    for members in groups.values():
        for a, b in combinations(members, 2):
            if layout_key(a["r"]) == layout_key(b["r"]):
                continue
            if abs(math.log(a["measured"] / b["measured"])) < math.log1p(min_gap):
                continue
            total += 1
            same_release += a["r"].get("release") == b["r"].get("release")
            agree += (a["measured"] > b["measured"]) == (a["estimate"] > b["estimate"])
    return agree, total, same_release


def summarise(rows: list[dict]) -> dict:
    logs = [math.log(row["estimate"] / row["measured"]) for row in rows]
    return {"n": len(rows), "median": math.exp(statistics.median(logs)),
            "mean_abs_log": statistics.mean(abs(x) for x in logs),
            "within_15": sum(abs(x) <= math.log(1.15) for x in logs),
            "within_30": sum(abs(x) <= math.log(1.30) for x in logs)}


def score(records: list[dict]) -> list[dict]:
    rows = []
    for r in records:
        if not scorable(r):
            continue
        tokens, recompute, memory = estimate(r)
        card = find_bundled_model(r["model"])
        rows.append({"r": r, "measured": measured_tokens_per_s(r), "estimate": tokens, "recompute": recompute,
                     "memory_gib": memory, "kind": "moe" if card.is_moe else "dense"})
    return rows


def _release(r: dict) -> tuple[int, ...]:
    return release_order(r.get("release"))


def split_check(rows: list[dict], upto: str) -> tuple[float, dict, dict, dict]:
    """(factor fitted on the MoE records up to release ``upto``, those records, the later ones without a
    factor, the later ones with the fitted factor): the estimates carry the shipped factor, taken out first."""
    cut = _release({"release": upto})
    unscaled = [{**row, "estimate": row["estimate"] * C.MOE_MEASURED_STEP_FACTOR}
                for row in rows if row["kind"] == "moe"]
    early = [row for row in unscaled if _release(row["r"]) <= cut]
    later = [row for row in unscaled if _release(row["r"]) > cut]
    factor = math.exp(statistics.median(math.log(row["estimate"] / row["measured"]) for row in early))
    fitted = [{**row, "estimate": row["estimate"] / factor} for row in later]
    return factor, summarise(early), summarise(later), summarise(fitted)


def _line(label: str, s: dict) -> str:
    return (f"| {label} | {s['n']} | {s['median']:.2f} | {s['mean_abs_log']:.2f} | "
            f"{s['within_15']} ({s['within_15'] / s['n']:.0%}) | {s['within_30']} ({s['within_30'] / s['n']:.0%}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--verbose", action="store_true", help="one line per record")
    ap.add_argument("--split-release", metavar="R", help="fit the MoE factor on releases up to R, score the later ones")
    ap.add_argument("--smoke", action="store_true", help="the same run, which takes seconds (the suite runs it)")
    args = ap.parse_args()
    rows = score(json.loads(args.data.read_text()))
    if args.verbose:
        for row in sorted(rows, key=lambda x: x["estimate"] / x["measured"]):
            r = row["r"]
            print(f"{r['model']:28s} {r['hardware']:6s} {r['num_gpus']:5d} {r['precision_token']:6s} {r['mode']:8s} "
                  f"TP{r['tp']} PP{r['pp']} VP{r.get('vp') or 1} CP{r['cp']} EP{r['ep']} MBS{r['micro_batch_size']} "
                  f"FSDP{int(bool(r.get('fsdp')))} {row['recompute']:9s} measured {row['measured']:8.0f} "
                  f"estimate {row['estimate']:8.0f} x{row['estimate'] / row['measured']:.2f} ({r.get('release')})")
    print("| records | n | median estimate / measured | mean abs log error | within 15 % | within 30 % |")
    print("|---|---|---|---|---|---|")
    print(_line("all", summarise(rows)))
    for kind in ("dense", "moe"):
        print(_line(kind, summarise([x for x in rows if x["kind"] == kind])))
    for hw in sorted({x["r"]["hardware"] for x in rows}):
        for kind in ("dense", "moe"):
            subset = [x for x in rows if x["r"]["hardware"] == hw and x["kind"] == kind]
            if subset:
                print(_line(f"{hw} {kind}", summarise(subset)))
    if args.split_release:
        factor, early, later, fitted = split_check(rows, args.split_release)
        print(f"MoE factor fitted on the {early['n']} records up to {args.split_release}: {factor:.2f}; the "
              f"{later['n']} later records: mean abs log error {later['mean_abs_log']:.3f} -> "
              f"{fitted['mean_abs_log']:.3f}, "
              f"within 30 % {later['within_30']} -> {fitted['within_30']} ({fitted['within_30'] / fitted['n']:.1%})")
    agree, total, same_release = pair_order(rows)
    print(f"pair order (two layouts of one request, measured > 5 % apart): the model agrees on {agree} of {total}"
          f" ({same_release} of the pairs from one release)")

if __name__ == "__main__":
    main()
