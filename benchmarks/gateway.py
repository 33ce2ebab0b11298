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

Progress goes to stderr, figures to stdout, each server's output to var/bench/gateway-logs/. This module schedules
the runs and reports them; benchmarks.gateway_targets starts the targets, benchmarks.gateway_client measures them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from .gateway_client import WARMUP, Client, Run, client_loop
from .gateway_targets import (
    BENCH_DIR,
    ROOT,
    UPSTREAM_KEY,
    Target,
    ensure_litellm,
    log,
    start_gryvia,
    start_litellm,
    start_upstream,
    stop_all,
)
from .procstat import Processes, SetupError, tree_rss_mb

LOG_DIR = BENCH_DIR / "gateway-logs"
CONFIGS = ((False, 1), (False, 20), (True, 1), (True, 20))  # (stream, concurrency)
PROXIES = ("litellm", "gryvia")


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
        asyncio.run(client_loop())
        return 0
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a SIGTERM cleans up as Ctrl-C does
    procs, targets, notes = Processes(cwd=ROOT, log_dir=LOG_DIR), {}, []
    with contextlib.ExitStack() as cleanup:
        workdir = Path(tempfile.mkdtemp(prefix="gryvia-bench-gw-"))
        cleanup.callback(shutil.rmtree, workdir, ignore_errors=True)
        cleanup.callback(stop_all, procs)
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
