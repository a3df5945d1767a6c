"""The Runs view of the web page: the runs store's runs in a table, estimated against measured tokens/s per GPU
as an inline SVG plot (no script, no CDN), and one run's loss curve from its metrics.

The plots are computed here as coordinates; the template draws them, autoescaped like every page.
"""

from __future__ import annotations

import math
from typing import Optional

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.http.web import render
from service.runs.advice import reading_store
from service.runs.schema import RunRecord

router = APIRouter(include_in_schema=False)
WIDTH, HEIGHT, PAD = 560, 360, 48
SHOWN = 200
FILTERS = ("model", "gpu_type", "engine", "team", "cluster", "source")


def _log_scale(values: list[float], length: float, start: float) -> tuple:
    low, high = math.log10(min(values)), math.log10(max(values))
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    return lambda v: start + (math.log10(v) - low) / (high - low) * length, (low, high)


def _ticks(bounds: tuple[float, float]) -> list[float]:
    return [10.0 ** e for e in range(math.floor(bounds[0]), math.ceil(bounds[1]) + 1)
            if bounds[0] - 1e-9 <= e <= bounds[1] + 1e-9]


def scatter(runs: list[RunRecord]) -> Optional[dict]:
    """Points (estimated, measured tokens/s/GPU, log-log) with the diagonal where they agree."""
    pairs = [(r, r.measurement.estimate_tokens_per_s_per_gpu, r.measured_tokens_per_s_per_gpu) for r in runs]
    pairs = [(r, e, m) for r, e, m in pairs if e and m]
    if not pairs:
        return None
    values = [v for _, e, m in pairs for v in (e, m)]
    x, bounds = _log_scale(values, WIDTH - 2 * PAD, PAD)
    y_up, _ = _log_scale(values, HEIGHT - 2 * PAD, PAD)

    def y(v: float) -> float:
        return HEIGHT - y_up(v)

    lo, hi = 10 ** bounds[0], 10 ** bounds[1]
    points = [{"x": round(x(e), 1), "y": round(y(m), 1), "source": r.provenance.source,
               "label": f"run {r.id}: {r.request.model}, estimated {e:,.0f}, measured {m:,.0f} tok/s/GPU"}
              for r, e, m in pairs]
    ticks = [{"at_x": round(x(t), 1), "at_y": round(y(t), 1), "text": f"{t:g}"} for t in _ticks(bounds)]
    return {"width": WIDTH, "height": HEIGHT, "points": points, "ticks": ticks,
            "diagonal": [round(x(lo), 1), round(y(lo), 1), round(x(hi), 1), round(y(hi), 1)]}


def loss_curve(run: RunRecord) -> Optional[dict]:
    """The run's (step, loss) points as one polyline, linear axes."""
    points = run.measurement.loss_curve
    if len(points) < 2:
        return None
    steps, losses = [p[0] for p in points], [p[1] for p in points]
    s0, s1 = min(steps), max(steps) or 1
    l0, l1 = min(losses), max(losses)
    span_s, span_l = (s1 - s0) or 1, (l1 - l0) or 1

    def at(step: float, loss: float) -> str:
        return (f"{PAD + (step - s0) / span_s * (WIDTH - 2 * PAD):.1f},"
                f"{HEIGHT - PAD - (loss - l0) / span_l * (HEIGHT - 2 * PAD):.1f}")

    return {"width": WIDTH, "height": HEIGHT, "line": " ".join(at(s, v) for s, v in points),
            "first": (s0, losses[0]), "last": (s1, losses[-1]), "low": l0, "high": l1}


@router.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request) -> HTMLResponse:
    form = {key: (request.query_params.get(key) or "").strip()[:256] for key in FILTERS}
    store = reading_store()
    runs = [] if store is None else store.query(limit=SHOWN, **{k: v or None for k, v in form.items()})
    return render(request, "runs.html", {"page": "runs", "form": form, "runs": runs, "plot": scatter(runs),
                                         "store": store.display_url if store else None, "shown": SHOWN})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: int) -> HTMLResponse:
    store = reading_store()
    run = None if store is None else store.get(run_id)
    if run is None:
        return render(request, "runs.html", {"page": "runs", "form": dict.fromkeys(FILTERS, ""), "runs": [],
                                             "plot": None, "store": None, "shown": SHOWN,
                                             "problems": [{"message": f"no run {run_id} in the runs store",
                                                           "field": "id", "suggestions": []}]}, status_code=404)
    return render(request, "run.html", {"page": "runs", "run": run, "curve": loss_curve(run)})
