"""`make bench-gateway`: the stand-in upstream directly, LiteLLM's proxy and Gryvia's gateway, one client for all.

Starts `benchmarks.upstream` as its own process on loopback, LiteLLM's proxy (installed once into
var/bench/litellm-venv from PyPI; one `model_list` entry `openai/fake-gpt` to the stand-in, a random master key,
`LITELLM_LOCAL_MODEL_COST_MAP=True`, telemetry off, one uvicorn worker) and Gryvia in its production profile
(PostgreSQL database gryvia_bench_gw, Redis db 13, `manage.py serve`). A client in its own process (asyncio + httpx,
a keep-alive pool of C connections, C workers over N requests, 20 warm-up requests) sends every target the same
chat completion (`max_tokens` 8; streamed with `stream_options.include_usage`, or not) at concurrency 1 and 20,
3 runs each. The direct upstream runs just before each proxy run, so drift hits both; a proxy's added latency is
its p50/p95 minus that direct run's. CPU per request is the procfs CPU of the proxy's whole process tree
(benchmarks.procstat) over the run, sampled after a settle pause before and after it so that deferred work (a
metering flush) lands in the run that caused it. Then the six medians of the per-run ratios Gryvia / LiteLLM.

    python -m benchmarks.gateway                                  # all three targets, default sizes
    python -m benchmarks.gateway --targets direct,litellm --requests-c1 100 --requests-c20 200 --runs 1
    python -m benchmarks.gateway --keep                           # leave everything up until Ctrl-C

Progress goes to stderr, figures to stdout, each server's output to var/bench/gateway-logs/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import secrets
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .procstat import Processes, SetupError, free_port, tree_cpu_s, tree_rss_mb

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench"
LITELLM_VENV = BENCH_DIR / "litellm-venv"
LOG_DIR = BENCH_DIR / "gateway-logs"
MODEL = "fake-gpt"
UPSTREAM_KEY = "sk-standin"
PG_SERVER = "postgres://postgres@127.0.0.1:5432"
GRYVIA_DB = "gryvia_bench_gw"
GRYVIA_REDIS = "redis://127.0.0.1:6379/13"
PROMPT = "Say hello to the benchmark in five words."
WARMUP = 20
CONFIGS = ((False, 1), (False, 20), (True, 1), (True, 20))  # (stream, concurrency)
PROXIES = ("litellm", "gryvia")
# Not inherited by what this starts: another profile's settings, a proxy that would take loopback traffic elsewhere.
_DROPPED_ENV = re.compile(
    r"^(DATABASE_URL|REDIS_URL|DJANGO_.*|GRYVIA_.*|LITELLM_.*|VIRTUAL_ENV|PYTHONPATH|.*_PROXY)$", re.I
)


@dataclass
class Target:
    name: str
    url: str  # the OpenAI base URL, …/v1
    key: str
    pid: int  # root of the process tree whose CPU is measured


@dataclass
class Run:
    rps: float
    p50: float  # ms
    p95: float
    cpu_ms: float  # CPU milliseconds per request of the target's process tree
    errors: dict[str, int]
    usage_missing: int
    added: tuple[float, float] | None = None  # (p50, p95) over the direct run just before, ms


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _stop_all(procs: Processes) -> None:
    for name, left in procs.stop_all():
        if name == "upstream":  # its last line has its request count and its CPU seconds
            log(f"{name}: {left}")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _DROPPED_ENV.match(k)}
    return env | {"NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"} | extra


# --- the targets ------------------------------------------------------------------------------------------------


def start_upstream(procs: Processes) -> str:
    """The stand-in on a port it picks; returns its /v1 URL."""
    argv = [sys.executable, "-m", "benchmarks.upstream", "--port", "0", "--models", MODEL]
    proc = procs.start("upstream", argv, env=_env(), pipe_out=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not (match := re.search(r"listening on (\S+)", line)):
        raise SetupError(f"the stand-in upstream did not start ({line.strip()!r}); {procs.tail('upstream')}")
    return match.group(1)


def ensure_litellm(procs: Processes) -> str:
    """LiteLLM's proxy in its own venv, installed from PyPI unless a working one is there; returns how it went."""
    python = LITELLM_VENV / "bin" / "python"
    code = "import importlib.metadata as m, litellm.proxy.proxy_cli; print(m.version('litellm'))"
    probe = functools.partial(subprocess.run, [str(python), "-c", code], capture_output=True, text=True, env=_env())
    if python.exists():
        found = probe()
        if found.returncode == 0:
            return f"litellm {found.stdout.strip()} (reused {LITELLM_VENV.relative_to(ROOT)})"
        log(f"litellm: {LITELLM_VENV} does not import ({found.stderr.strip()[-200:]}); reinstalling")
        shutil.rmtree(LITELLM_VENV)
    log("litellm: pip install 'litellm[proxy]' into a new venv (about a minute)")
    started = time.monotonic()
    LITELLM_VENV.parent.mkdir(parents=True, exist_ok=True)
    install = [python, "-m", "pip", "install", "--disable-pip-version-check", "litellm[proxy]"]
    if (
        subprocess.run([sys.executable, "-m", "venv", LITELLM_VENV]).returncode
        or procs.run("litellm-install", install, env=_env()).returncode
    ):
        shutil.rmtree(LITELLM_VENV, ignore_errors=True)
        raise SetupError(f"installing litellm[proxy] from PyPI failed; {procs.tail('litellm-install')}")
    elapsed = time.monotonic() - started
    if (found := probe()).returncode:
        raise SetupError(f"litellm installed but does not import: {found.stderr.strip()[-500:]}")
    return f"litellm {found.stdout.strip()} (installed in {elapsed:.0f} s)"


def start_litellm(procs: Processes, upstream_url: str, workdir: Path) -> tuple[Target, str]:
    key = "sk-" + secrets.token_hex(24)  # LiteLLM refuses publicly known master keys such as sk-1234
    config = workdir / "litellm.yaml"
    config.write_text(
        f"model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{MODEL}\n"
        f"      api_base: {upstream_url}\n      api_key: {UPSTREAM_KEY}\n"
        "general_settings:\n  master_key: os.environ/LITELLM_MASTER_KEY\n"
        "litellm_settings:\n  telemetry: false\n"
    )
    port = free_port()
    env = _env(LITELLM_MASTER_KEY=key, LITELLM_LOCAL_MODEL_COST_MAP="True")
    argv = [LITELLM_VENV / "bin" / "litellm", "--config", config, "--host", "127.0.0.1", "--port", port]
    proc = procs.start("litellm", argv, env=env)
    took = procs.wait_http("litellm", proc, f"http://127.0.0.1:{port}/health/liveliness", 300)
    return Target("litellm", f"http://127.0.0.1:{port}/v1", key, proc.pid), f"up in {took:.0f} s"


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def start_gryvia(procs: Processes, upstream_url: str, workdir: Path, cleanup: contextlib.ExitStack):
    """Gryvia's production profile against the stand-in, as the gateway's bench contract (benchmarks/README.md)."""
    import redis

    python = ROOT / ".venv" / "bin" / "python"
    data_dir = workdir / "gryvia-data"
    data_dir.mkdir()
    env = _env(
        DJANGO_SETTINGS_MODULE="gryvia_site.settings.base",
        DATABASE_URL=f"{PG_SERVER}/{GRYVIA_DB}",
        REDIS_URL=GRYVIA_REDIS,
        GRYVIA_DATA_DIR=str(data_dir),
        GRYVIA_ENV="development",
        GRYVIA_DEBUG="0",
    )
    try:
        _pg_admin(f'DROP DATABASE IF EXISTS "{GRYVIA_DB}" WITH (FORCE)')
        _pg_admin(f'CREATE DATABASE "{GRYVIA_DB}"')
        cleanup.callback(_pg_admin, f'DROP DATABASE IF EXISTS "{GRYVIA_DB}" WITH (FORCE)')
        store = redis.Redis.from_url(GRYVIA_REDIS, socket_connect_timeout=5)
        store.flushdb()
        cleanup.callback(store.flushdb)
        cleanup.callback(_stop_all, procs)  # LIFO: the servers stop before the database is dropped
    except Exception as exc:  # noqa: BLE001 - any driver error means the same thing here
        raise SetupError(f"gryvia needs PostgreSQL on 127.0.0.1:5432 and Redis on :6379: {exc}") from exc
    if procs.run("gryvia-migrate", [python, "manage.py", "migrate", "--noinput"], env=env).returncode:
        raise SetupError(f"gryvia: migrate failed; {procs.tail('gryvia-migrate')}")
    setup = [python, "manage.py", "llm_bench_setup", "--upstream-url", upstream_url, "--model", MODEL]
    if procs.run("gryvia-setup", setup + ["--upstream-key", UPSTREAM_KEY], env=env).returncode:
        text = procs.log_text("gryvia-setup")
        if "Unknown command" in text:
            raise SetupError("gryvia: `manage.py llm_bench_setup` does not exist yet; run --targets direct,litellm")
        raise SetupError(f"gryvia: llm_bench_setup failed; {procs.tail('gryvia-setup')}")
    keys = re.findall(r"^key=(\S+)$", procs.log_text("gryvia-setup"), re.M)
    if not keys:
        raise SetupError(f"gryvia: llm_bench_setup printed no `key=...` line; {procs.tail('gryvia-setup')}")
    port = free_port()
    proc = procs.start("gryvia", [python, "manage.py", "serve", "--host", "127.0.0.1", "--port", port], env=env)
    took = procs.wait_http("gryvia", proc, f"http://127.0.0.1:{port}/healthz", 120)
    return Target("gryvia", f"http://127.0.0.1:{port}/v1", keys[-1], proc.pid), f"up in {took:.0f} s"


# --- the client, in its own process --------------------------------------------------------------------------------


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


async def _client_loop() -> None:
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
        self.proc = procs.start("client", argv, env=_env(), pipe_in=True, pipe_out=True)

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


# --- the schedule and the report -----------------------------------------------------------------------------------


def _label(stream: bool, c: int) -> str:
    return f"stream={'yes' if stream else 'no'} c={c}"


def _spread(values: list[float]) -> str:
    values = [v for v in values if v == v]  # a run with no successful request has no latency (NaN)

    def num(value: float) -> str:
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}"

    return f"{num(statistics.median(values))} [{num(min(values))}-{num(max(values))}]" if values else "n/a"


def measure(client: Client, targets: dict[str, Target], args: argparse.Namespace) -> dict[tuple, list[Run]]:
    results: dict[tuple, list[Run]] = {}
    proxies = [name for name in PROXIES if name in targets]
    for stream, c in CONFIGS:
        n = args.requests_c1 if c == 1 else args.requests_c20
        for i in range(args.runs):
            order = proxies[::-1] if i % 2 else proxies  # alternate which proxy goes first
            for name in order or [None]:
                direct = None
                if "direct" in targets:
                    direct = client.run(targets["direct"], stream, c, n, 0.0)
                    results.setdefault(("direct", stream, c), []).append(direct)
                    _report_run("direct", stream, c, i, args.runs, direct)
                if name is None:
                    continue
                run = client.run(targets[name], stream, c, n, args.settle_s)
                if direct is not None:
                    run.added = (run.p50 - direct.p50, run.p95 - direct.p95)
                results.setdefault((name, stream, c), []).append(run)
                _report_run(name, stream, c, i, args.runs, run)
    return results


def _report_run(name: str, stream: bool, c: int, i: int, runs: int, run: Run) -> None:
    added = f" added p50 {run.added[0]:+.2f} ms" if run.added else ""
    log(
        f"[{_label(stream, c)} run {i + 1}/{runs}] {name}: {run.rps:.1f} rps, p50 {run.p50:.2f} ms, "
        f"p95 {run.p95:.2f} ms,{added} cpu {run.cpu_ms:.2f} ms/request, errors {sum(run.errors.values())}"
    )
    for message, count in run.errors.items():
        print(f"error: {name} {_label(stream, c)} run {i + 1}: {count}x {message}", flush=True)


def report(results: dict[tuple, list[Run]], targets: dict[str, Target]) -> int:
    rows = [["target", "config", "rps", "p50_ms", "p95_ms", "added_p50_ms", "added_p95_ms", "cpu_ms/request", "errors"]]
    failed = 0
    for name in ("direct", *PROXIES):
        for stream, c in CONFIGS:
            runs = results.get((name, stream, c))
            if not runs:
                continue
            errors = [i + 1 for i, run in enumerate(runs) if run.errors]
            failed += len(errors)
            added = [run.added for run in runs if run.added]
            rows.append([name, _label(stream, c), _spread([r.rps for r in runs])])
            rows[-1] += [_spread([r.p50 for r in runs]), _spread([r.p95 for r in runs])]
            rows[-1] += [_spread([a[0] for a in added]), _spread([a[1] for a in added])]
            rows[-1] += [_spread([r.cpu_ms for r in runs]), f"in runs {errors}" if errors else "0"]
            if missing := sum(r.usage_missing for r in runs):
                rows[-1][-1] += f", {missing} streams without usage"
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]))]
    for row in rows:
        print("".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print("(spread: [min-max] over the runs; direct's cpu is the stand-in upstream's own)")
    for name in PROXIES:
        if name in targets:
            print(f"memory {name}: {tree_rss_mb(targets[name].pid):.0f} MiB resident (process tree)")

    def ratio(metric, stream: bool, c: int) -> str:
        pairs = zip(results.get(("gryvia", stream, c), []), results.get(("litellm", stream, c), []), strict=False)
        values = [metric(g) / metric(lite) for g, lite in pairs if metric(g) is not None and metric(lite)]
        return f"{statistics.median(values):.2f}" if values else "n/a"

    for stream, c in CONFIGS:
        print(f"ratio cpu_per_request {_label(stream, c)}: {ratio(lambda r: r.cpu_ms, stream, c)}")
    for stream in (False, True):
        print(f"ratio added_p50 {_label(stream, 1)}: {ratio(lambda r: r.added and r.added[0], stream, 1)}")
    if failed:
        print(f"warning: {failed} run(s) had errors (see the error: lines); their figures are suspect")
    return 1 if failed else 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="direct,litellm,gryvia", help="a subset of direct,litellm,gryvia")
    parser.add_argument("--requests-c1", type=int, default=300, help="measured requests per run at concurrency 1")
    parser.add_argument("--requests-c20", type=int, default=600, help="measured requests per run at concurrency 20")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=1.0, help="pause before each proxy CPU sample")
    parser.add_argument("--keep", action="store_true", help="leave the processes up until Ctrl-C")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not args.targets or set(args.targets) - {"direct", *PROXIES}:
        parser.error("--targets: a comma-separated subset of direct,litellm,gryvia")
    if min(args.requests_c1, args.requests_c20, args.runs) < 1:
        parser.error("--requests-c1, --requests-c20 and --runs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.client:
        asyncio.run(_client_loop())
        return 0
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a SIGTERM cleans up as Ctrl-C does
    procs, targets, notes = Processes(cwd=ROOT, log_dir=LOG_DIR), {}, []
    with contextlib.ExitStack() as cleanup:
        workdir = Path(tempfile.mkdtemp(prefix="gryvia-bench-gw-"))
        cleanup.callback(shutil.rmtree, workdir, ignore_errors=True)
        cleanup.callback(_stop_all, procs)
        try:
            upstream = start_upstream(procs)
            upstream_pid = procs.procs[-1][1].pid
            notes.append(f"upstream {upstream}")
            if "direct" in args.targets:
                targets["direct"] = Target("direct", upstream, UPSTREAM_KEY, upstream_pid)
            if "gryvia" in args.targets:
                targets["gryvia"], up = start_gryvia(procs, upstream, workdir, cleanup)
                notes.append(f"gryvia {up}")
            if "litellm" in args.targets:
                how = ensure_litellm(procs)
                targets["litellm"], up = start_litellm(procs, upstream, workdir)
                notes.append(f"{how}, {up}")
            log("; ".join(notes))
            client = Client(procs)
            results = measure(client, targets, args)
            print(f"gateway benchmark: {'; '.join(notes)}; runs={args.runs} requests c=1: {args.requests_c1}, "
                  f"c=20: {args.requests_c20}; warm-up {WARMUP}")  # fmt: skip
            status = report(results, targets)
            if args.keep:
                for target in targets.values():
                    log(f"{target.name}: {target.url} key {target.key} pid {target.pid}")
                log(f"logs in {LOG_DIR}; Ctrl-C stops everything")
                signal.pause()
            return status
        except SetupError as exc:
            print(f"bench-gateway: {exc}", file=sys.stderr, flush=True)
            return 2
        except KeyboardInterrupt:
            log("interrupted: stopping everything this benchmark started")
            return 0 if args.keep else 130


if __name__ == "__main__":
    raise SystemExit(main())
