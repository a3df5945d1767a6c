"""Load test of the HTTP service: N concurrent clients for T seconds per scenario.

Starts ``uvicorn service.http.app:app`` on 127.0.0.1 (a free port, never another
interface) in a child process, waits for /healthz, then drives each scenario
with ``--clients`` keep-alive connections for ``--duration`` seconds and
reports requests/s, p50/p90/p99/max latency and errors (any non-2xx or
connection failure). The reference scenario is GET /healthz, the cost of the
HTTP stack itself; each scenario's throughput is also given as a ratio to it.

The client is a minimal HTTP/1.1 keep-alive loop over asyncio streams, so on a
2-core machine the load generator takes as little CPU from the server as possible.

    python benchmarks/load.py                       # 50 clients x 20 s, each scenario
    python benchmarks/load.py --clients 10 --duration 5 --scenarios recommend
    python benchmarks/load.py --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HOST = "127.0.0.1"  # loopback only: a load test must never listen on a shared interface
MAX_CLIENTS = 500
MAX_DURATION_S = 120


@dataclass
class Scenario:
    name: str
    method: str
    path: str
    bodies: list[bytes] = field(default_factory=lambda: [b""])
    content_type: str = "application/json"
    warm: bool = True  # send each body once before measuring (fills the per-process caches)

    def requests(self) -> list[bytes]:
        out = []
        for body in self.bodies:
            head = f"{self.method} {self.path} HTTP/1.1\r\nHost: {HOST}\r\n"
            if self.method == "POST":
                head += f"Content-Type: {self.content_type}\r\nContent-Length: {len(body)}\r\n"
            out.append(head.encode() + b"\r\n" + body)
        return out


def scenarios() -> dict[str, Scenario]:
    import recipe_index

    recommend_bodies = [
        {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "goal": "pretrain"},
        {"model": "llama3-70b", "gpus": 8, "gpu_type": "h100", "nodes": 4, "goal": "pretrain"},
        {"model": "qwen3-8b", "gpus": 8, "gpu_type": "h200", "goal": "sft", "seq_length": 8192},
        {"model": "llama3-8b", "gpus": 4, "gpu_type": "a100-80gb", "goal": "peft"},
    ]
    known = {m.id for m in recipe_index.list_models()}
    recommend_bodies = [b for b in recommend_bodies if b["model"] in known]
    recipe = recipe_index.load_recipe_text("llama3_8b_pretrain_config").encode()
    return {
        "healthz": Scenario("healthz", "GET", "/healthz"),
        "recommend": Scenario("recommend", "POST", "/v1/recommend", [json.dumps(b).encode() for b in recommend_bodies]),
        "plan": Scenario("plan", "POST", "/v1/plan", [json.dumps({**b, "top": 5}).encode() for b in recommend_bodies]),
        # Every request a cache miss: distinct global batches of one model, so the planner runs each time.
        "recommend-miss": Scenario("recommend-miss", "POST", "/v1/recommend", [
            json.dumps({"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "global_batch_size": 8 * n}).encode()
            for n in range(1, 20001)], warm=False),
        "validate": Scenario("validate", "POST", "/v1/validate", [recipe], content_type="text/plain"),
    }


# ------------------------------------------------------------------ client


async def _read_response(reader: asyncio.StreamReader) -> int:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection")
    status = int(status_line.split()[1])
    length, chunked = 0, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readline()).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        await reader.readexactly(length)
    return status


async def _client(port: int, requests: list[bytes], offset: int, stride: int, deadline: float,
                  latencies: list[float], errors: list[str]) -> None:
    reader = writer = None
    i = offset
    while time.perf_counter() < deadline:
        payload = requests[i % len(requests)]
        i += stride  # clients never send the same body twice before the list wraps
        start = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(payload)
            await writer.drain()
            status = await _read_response(reader)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            errors.append(type(exc).__name__)
            if writer is not None:
                writer.close()
            reader = writer = None
            continue
        latencies.append(time.perf_counter() - start)
        if not 200 <= status < 300:
            errors.append(f"HTTP {status}")
    if writer is not None:
        writer.close()


async def drive(port: int, scenario: Scenario, clients: int, duration: float) -> dict:
    requests = scenario.requests()
    latencies: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    deadline = start + duration
    await asyncio.gather(*(_client(port, requests, c, clients, deadline, latencies, errors) for c in range(clients)))
    elapsed = time.perf_counter() - start
    return summarize(scenario.name, latencies, errors, elapsed, clients)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def summarize(name: str, latencies: list[float], errors: list[str], elapsed: float, clients: int) -> dict:
    values = sorted(latencies)
    kinds: dict[str, int] = {}
    for e in errors:
        kinds[e] = kinds.get(e, 0) + 1
    return {
        "scenario": name,
        "clients": clients,
        "seconds": round(elapsed, 2),
        "requests": len(values),
        "req_per_s": round(len(values) / elapsed, 1),
        "p50_ms": round(percentile(values, 0.50) * 1000, 1),
        "p90_ms": round(percentile(values, 0.90) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "max_ms": round((values[-1] if values else float("nan")) * 1000, 1),
        "errors": len(errors),
        "error_kinds": kinds,
    }


# ------------------------------------------------------------------ server


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_server(port: int, workers: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "uvicorn", "service.http.app:app", "--host", HOST, "--port", str(port),
           "--workers", str(workers), "--log-level", "warning", "--no-access-log"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(cmd, cwd=REPO, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"server exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise RuntimeError("server did not answer /healthz within 60 s")


def warm_up(port: int, scenario: Scenario) -> None:
    """One request per distinct body, so the first measured second is not the cold start."""
    for body in scenario.bodies if scenario.warm else scenario.bodies[-1:]:
        req = urllib.request.Request(f"http://{HOST}:{port}{scenario.path}", method=scenario.method,
                                     data=body if scenario.method == "POST" else None,
                                     headers={"Content-Type": scenario.content_type})
        try:
            urllib.request.urlopen(req, timeout=30).read()
        except OSError as exc:
            print(f"warm-up of {scenario.name} failed: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--duration", type=float, default=20.0, help="seconds per scenario")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--scenarios", default="healthz,recommend,validate",
                   help="comma-separated: healthz, recommend, recommend-miss, plan, validate")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--smoke", action="store_true",
                   help="the same code path in seconds (the suite runs it): 2 clients, 0.5 s per scenario")
    args = p.parse_args(argv)
    if args.smoke:
        args.clients, args.duration = 2, 0.5
    if not 1 <= args.clients <= MAX_CLIENTS or not 0 < args.duration <= MAX_DURATION_S:
        p.error(f"--clients must be 1-{MAX_CLIENTS} and --duration 0-{MAX_DURATION_S} s")
    available = scenarios()
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in available]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; choose from {sorted(available)}")

    port = free_port()
    server = start_server(port, args.workers)
    results = []
    try:
        for name in chosen:
            warm_up(port, available[name])
            results.append(asyncio.run(drive(port, available[name], args.clients, args.duration)))
    finally:
        server.terminate()
        server.wait(timeout=30)

    reference = next((r for r in results if r["scenario"] == "healthz"), None)
    print(f"{os.cpu_count()} CPU(s), {args.workers} worker(s), {args.clients} clients, "
          f"{args.duration:g} s per scenario")
    print(f"{'scenario':14} {'req/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'errors':>7} {'vs healthz':>10}")
    for r in results:
        ratio = f"{r['req_per_s'] / reference['req_per_s']:.2f}" if reference and reference["req_per_s"] else "-"
        print(f"{r['scenario']:14} {r['req_per_s']:8.1f} {r['p50_ms']:8.1f} {r['p90_ms']:8.1f} {r['p99_ms']:8.1f} "
              f"{r['max_ms']:8.1f} {r['errors']:7d} {ratio:>10}")
        if r["error_kinds"]:
            print(f"  errors: {r['error_kinds']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"workers": args.workers, "results": results}, indent=2))
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
