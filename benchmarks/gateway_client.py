"""`make bench-gateway`'s client: a process of its own (`python -m benchmarks.gateway --client`, asyncio + httpx, a
keep-alive pool of C connections, C workers over N requests, 20 warm-up requests) and the parent's handle on it,
which measures one target in one configuration: throughput, p50/p95 latency and the CPU per request of the
target's process tree (benchmarks.procstat), sampled after a settle pause before and after the run.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass

from .gateway_targets import MODEL, Target, child_env, log
from .procstat import Processes, SetupError, tree_cpu_s

PROMPT = "Say hello to the benchmark in five words."
WARMUP = 20


@dataclass
class Run:
    rps: float
    p50: float  # ms
    p95: float
    cpu_ms: float  # CPU milliseconds per request of the target's process tree
    errors: dict[str, int]
    usage_missing: int
    added: tuple[float, float] | None = None  # (p50, p95) over the direct run just before, ms


def _body(stream: bool) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return json.dumps(body)


async def _drive(client, headers: dict, body: bytes, stream: bool, requests: int, concurrency: int) -> dict:
    import httpx

    todo, latencies, errors, usage_missing = iter(range(requests)), [], Counter(), 0

    async def one() -> None:
        nonlocal usage_missing
        started = time.perf_counter()
        if stream:
            async with client.stream("POST", "chat/completions", content=body, headers=headers) as reply:
                data = b"".join([chunk async for chunk in reply.aiter_bytes()])
        else:
            reply = await client.post("chat/completions", content=body, headers=headers)
            data = reply.content
        elapsed = time.perf_counter() - started
        if not 200 <= reply.status_code < 300:
            errors[f"HTTP {reply.status_code}: {' '.join(data[:160].decode(errors='replace').split())}"] += 1
        elif stream and b"[DONE]" not in data[-40:]:
            errors["the stream ended without data: [DONE]"] += 1
        else:
            usage_missing += stream and re.search(rb'"usage":\s*\{', data) is None
            latencies.append(elapsed * 1000)

    async def worker() -> None:
        for _ in todo:
            try:
                await one()
            except httpx.HTTPError as exc:
                errors[f"{type(exc).__name__}: {exc}"] += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    return {"latencies": latencies, "errors": errors, "wall": wall, "usage_missing": usage_missing}


async def client_loop() -> None:
    """One JSON spec per line on stdin: warm up, print `ready`, wait for a line, run, print the result as JSON."""
    import httpx

    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        spec = json.loads(line)
        c, body = spec["concurrency"], spec["body"].encode()
        headers = {"authorization": f"Bearer {spec['key']}", "content-type": "application/json"}
        limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
        url = spec["url"].rstrip("/") + "/"
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120, trust_env=False) as client:
            warm = await _drive(client, headers, body, spec["stream"], WARMUP, c)
            print(json.dumps({"ready": True, "errors": warm["errors"]}), flush=True)
            await loop.run_in_executor(None, sys.stdin.readline)
            result = await _drive(client, headers, body, spec["stream"], spec["requests"], c)
            print(json.dumps(result), flush=True)


class Client:
    """The parent's handle on the client process; `run` measures one target in one configuration."""

    def __init__(self, procs: Processes) -> None:
        argv = [sys.executable, "-m", "benchmarks.gateway", "--client"]
        self.procs = procs
        self.proc = procs.start("client", argv, env=child_env(), pipe_in=True, pipe_out=True)

    def _say(self, text: str) -> dict:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SetupError(f"the client process exited; {self.procs.tail('client')}")
        return json.loads(line)

    def run(self, target: Target, stream: bool, concurrency: int, requests: int, settle_s: float) -> Run:
        spec = {"url": target.url, "key": target.key, "body": _body(stream), "stream": stream}
        warm = self._say(json.dumps(spec | {"concurrency": concurrency, "requests": requests}))
        if warm["errors"]:
            log(f"  {target.name}: warm-up errors {warm['errors']}")
        time.sleep(settle_s)
        cpu0 = tree_cpu_s(target.pid)
        result = self._say("go")
        time.sleep(settle_s)
        cpu = tree_cpu_s(target.pid) - cpu0
        lat = result["latencies"] or [float("nan")]
        cuts = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0]] * 99
        p50, p95 = cuts[49], cuts[94]
        rps = requests / result["wall"]
        return Run(rps, p50, p95, cpu * 1000 / requests, result["errors"], result["usage_missing"])
