"""Load test of `transduce serve` over loopback: throughput and latency with and without dynamic batching.

Figures: BENCHMARKS.md, "CTranslate2 and serving" (the server tables).

    .venv/bin/python benchmarks/serve_load.py RUN --src FILE [--clients 32] [--requests 320] [--sentences 1]
        [--engine torch|ctranslate2] [--threads N] [--modes both|batched]
For each mode (one request at a time, then dynamic batching) a server for RUN is started in a subprocess on
127.0.0.1, warmed up, then CLIENTS concurrent clients send REQUESTS requests in all (each SENTENCES lines of FILE,
taken in turn) and wait for each answer before sending the next. Prints requests/s, sentences/s, p50/p95/p99
latency and the failed-request count per mode, and the throughput ratio, as JSON. Server start-up and warm-up are
not timed. The clients share the machine with the server, as they would in a test on one box.
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

import httpx

from transduce.data import read_lines, resolve_path

SERVER = (
    "from transduce.serving import serve; "
    "serve({run!r}, engine={engine!r}, threads={threads}, host='127.0.0.1', port={port}, batching={batching}, "
    "device={device!r}, log_level='warning')"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(run: str, *, batching: bool, device: str, engine: str, threads: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    code = SERVER.format(run=run, port=port, batching=batching, device=device, engine=engine, threads=threads)
    proc = subprocess.Popen([sys.executable, "-c", code], env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with status {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.25)
    proc.kill()
    raise SystemExit("the server did not start within 120 s")


async def load(url: str, bodies: list[dict], clients: int) -> tuple[list[float], int, float]:
    """Send every body with `clients` concurrent workers; returns latencies (s), failures and wall time (s)."""
    latencies: list[float] = []
    failures = 0
    next_body = iter(bodies)

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal failures
        for body in next_body:  # one shared iterator: each body is sent once
            start = time.perf_counter()
            try:
                response = await http.post(url + "/v1/translate", json=body)
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - start)
            failures += not ok

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=120.0) as http:
        start = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(clients)))
        return latencies, failures, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure(args: argparse.Namespace, bodies: list[dict], *, batching: bool) -> dict:
    proc, url = start_server(args.run, batching=batching, device=args.device, engine=args.engine, threads=args.threads)
    try:
        asyncio.run(load(url, bodies[: args.clients], args.clients))  # warm-up, not timed
        latencies, failures, seconds = asyncio.run(load(url, bodies, args.clients))
        info = httpx.get(url + "/v1/info").json()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ms = lambda q: round(1000 * percentile(latencies, q), 1)
    return {
        "engine": args.engine,
        "threads": args.threads,
        "batching": batching,
        "requests": len(bodies),
        "failed": failures,
        "seconds": round(seconds, 2),
        "requests_per_s": round(len(bodies) / seconds, 1),
        "sentences_per_s": round(len(bodies) * args.sentences / seconds, 1),
        "latency_ms": {"p50": ms(50), "p95": ms(95), "p99": ms(99)},
        "server_batching": info["batching"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--src", required=True, help="source sentences, one per line (plain or .gz)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=320, help="requests per mode, all clients together")
    parser.add_argument("--sentences", type=int, default=1, help="sentences per request")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch")
    parser.add_argument("--threads", type=int, default=0, help="the server's model threads (serve --threads)")
    parser.add_argument("--modes", choices=["both", "batched"], default="both", help="batched: dynamic batching only")
    args = parser.parse_args()
    lines = [line for line in read_lines(resolve_path(args.src)) if line.strip()]
    bodies = [
        {"text": [lines[(i * args.sentences + j) % len(lines)] for j in range(args.sentences)]}
        for i in range(args.requests)
    ]
    modes = (False, True) if args.modes == "both" else (True,)
    results = [measure(args, bodies, batching=batching) for batching in modes]
    print(
        json.dumps(
            {
                "run": args.run,
                "clients": args.clients,
                "sentences_per_request": args.sentences,
                "cpu_count": os.cpu_count(),
                "results": results,
                "speed_up": round(results[-1]["requests_per_s"] / results[0]["requests_per_s"], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
