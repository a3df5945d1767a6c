"""How fast `plan` ranks every layout, against a naive enumeration in the same script.

Both plan DeepSeek-V3 on 1,024 H100 and Llama 3 70B on 64 H100 (the recipes' sequence length and
global batch), estimates included for every layout. The planner shares work across layouts
(rules once per parallel shape, cached training state and per-token activations, step-time pieces
per micro batch, the recompute/sharding ladder stopping at the first fit, lazy breakdowns). The
reference evaluates every (shape, micro batch, recompute, sharding) candidate from scratch: the
rules, a fresh memory estimate and a fresh step-time estimate each. Both must agree on the best
layout. Reported: minimum over repeats of wall time and of process CPU time (the second is the
fairer figure on a shared machine), and the CPU time of the whole answer `plan` prints (the plan, its first 10
distinct shapes and the candidate sources: tuned, library, transferred).

    .venv/bin/python benchmarks/plan_speed.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.estimate.memory import estimate_memory, model_shape, usable_memory_gib  # noqa: E402
from service.estimate.steptime import estimate_step_time  # noqa: E402
from service.facts import Layout  # noqa: E402
from service.layouts.bridge_tables import explicit_layouts  # noqa: E402
from service.plan.planner import facts_for, make_request, plan  # noqa: E402
from service.plan.report import plan_json  # noqa: E402
from service.plan.search_space import micro_batch_sizes, recomputes, shardings, structures  # noqa: E402
from service.validate.checks import check_layout  # noqa: E402

CASES = [("deepseek-v3", 1024, "h100", 4096, 8192), ("llama3-70b", 64, "h100", 8192, 128)]


def naive_plan(request):
    """Every candidate evaluated independently: rules, memory and step time from scratch."""
    shape = model_shape(request.model)
    usable = usable_memory_gib(request.hardware.memory_gib)
    strings = request.engine == "megatron" and explicit_layouts(request.model.id)
    best = None
    count = 0
    for structure in structures(request, shape):
        dp = structure.dp(request.world_size)
        for mbs in micro_batch_sizes(request, dp):
            for recompute in recomputes(request.engine):
                for sharding, strategy in shardings(request.engine, request.peft):
                    lay = Layout(tp=structure.tp, pp=structure.pp, vp=structure.vp, cp=structure.cp,
                                 ep=structure.ep, etp=structure.etp, sp=structure.sp, micro_batch_size=mbs,
                                 recompute=recompute)
                    count += 1
                    if any(f.severity == "error" for f in check_layout(facts_for(request, lay, strategy))):
                        continue
                    m = request.global_batch_size // (mbs * dp)
                    memory = estimate_memory(shape, lay, world_size=request.world_size,
                                             seq_length=request.seq_length, num_microbatches=m, sharding=sharding,
                                             engine=request.engine, peft=request.peft, precision=request.precision,
                                             explicit_layout=strings)
                    t = estimate_step_time(shape, request.hardware, lay, world_size=request.world_size,
                                           seq_length=request.seq_length, global_batch_size=request.global_batch_size,
                                           precision=request.precision, sharding=sharding, engine=request.engine,
                                           explicit_layout=strings)
                    if memory.total <= usable and (best is None or t.step_time_s < best[0]):
                        best = (t.step_time_s, lay, sharding)
    return best, count


def timed(fn, repeats: int):
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
    return min(walls), min(cpus), result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="the smaller case, once (a test runs it)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats = 1
    print("| case | layouts | planner wall | planner CPU | answer CPU (top 10, sources) | naive (candidates) CPU | "
          "speed-up |")
    print("|---|---|---|---|---|---|---|")
    for model, gpus, gpu, seq, gbs in CASES[-1:] if args.smoke else CASES:
        request = make_request(model, gpus, gpu, seq_length=seq, global_batch_size=gbs)
        plan_json(plan(request), 10)  # warm the index and model caches, as a running service has them
        wall, cpu, result = timed(lambda: plan(request), args.repeats)
        _, answer_cpu, _ = timed(lambda: plan_json(plan(request), 10), args.repeats)
        _, naive_cpu, (naive_best, candidates) = timed(lambda: naive_plan(request), 1)
        fastest = max(result.fitting, key=lambda r: r.tokens_per_s)
        assert abs(fastest.time.step_time_s - naive_best[0]) <= 1e-9 * naive_best[0], "planner and naive disagree"
        print(f"| {model} on {gpus} x {gpu} | {len(result.layouts)} | {wall * 1e3:.0f} ms | {cpu * 1e3:.0f} ms | "
              f"{answer_cpu * 1e3:.0f} ms | {naive_cpu * 1e3:.0f} ms ({candidates}) | {naive_cpu / cpu:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
