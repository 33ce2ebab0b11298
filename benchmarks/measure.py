"""The admission benchmark's instruments (benchmarks.admission): what it counts and times around the cycles, apart
from what it runs."""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from collections import Counter
from typing import Any

_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+"?(\w+)')


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Calibration:
    """How fast this machine runs Python right now (shared VMs vary by tens of per cent within the hour): the CPU of
    a fixed pure-Python loop that stays in the caches, and of one that walks memory the caches cannot hold (as a
    pass over thousands of jobs' objects does), each the best of three. Built once (about 2 s and 200 MB), measured
    as often as wanted."""

    def __init__(self) -> None:
        import random

        # A random cycle through 2**21 list slots and as many str objects (~200 MB): each step misses the caches and,
        # on a VM, usually the TLB too. Built here; only the walk is timed.
        size = 1 << 21
        shuffled = list(range(size))
        random.Random(0).shuffle(shuffled)
        self._order = [0] * size  # one cycle through every slot: each slot holds the next one's index
        for here, after in zip(shuffled, shuffled[1:] + shuffled[:1], strict=True):
            self._order[here] = after
        self._objects = [str(i) for i in range(size)]

    @staticmethod
    def _loop() -> float:
        started = time.process_time()
        for _ in range(2000):
            sum(range(1000))
        return time.process_time() - started

    def _walk(self) -> float:
        order, objects = self._order, self._objects
        started, at, total = time.process_time(), 0, 0
        for _ in range(300_000):
            at = order[at]
            total += len(objects[at])
        return time.process_time() - started

    def measure(self) -> str:
        """`reference loop …: X ms of CPU; memory walk …: Y ms of CPU`, as measured now."""
        best, memory = min(self._loop() for _ in range(3)), min(self._walk() for _ in range(3))
        return (
            f"reference loop (sum(range(1000)) x 2,000): {best * 1000:.1f} ms of CPU; memory walk (300,000 random "
            f"steps over ~200 MB): {memory * 1000:.0f} ms of CPU"
        )


def interpreter_line(calibration: Calibration) -> str:
    """Which Python runs the cycles, and the machine's speed just before they start."""
    import platform

    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return (
        f"# interpreter: {platform.python_implementation()} {platform.python_version()} ({base}, "
        f"built {' '.join(platform.python_build())}); {calibration.measure()}"
    )


class Queries:
    """Counts SQL statements (connection.execute_wrapper), optionally by statement kind and table."""

    def __init__(self, *, by_table: bool) -> None:
        self.count = 0
        self.cpu = 0.0
        self.by_table: Counter[str] | None = Counter() if by_table else None

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        t0 = time.process_time()
        try:
            return self._run(execute, sql, params, many, context)
        finally:
            self.cpu += time.process_time() - t0

    def _run(self, execute, sql, params, many, context):
        if self.by_table is not None:
            match = _TABLE.search(sql)
            self.by_table[f"{sql.split(None, 1)[0].upper()} {match.group(1)}" if match else sql[:60]] += 1
        return execute(sql, params, many, context)


def idle_passes(size: int, reconciler: Any, queries: Queries, passes: int) -> None:
    """`passes` more passes at the same simulated instant (the last cycle left them nothing to do, or the first of
    them does what is left): the median CPU and executes of one, logged. Not counted in the run's figures."""
    from django.db import connection

    cpus, executes = [], []
    for _ in range(passes):
        before = queries.count
        cpu0 = time.process_time()
        with connection.execute_wrapper(queries):
            reconciler.run_pass()
        cpus.append(time.process_time() - cpu0)
        executes.append(queries.count - before)
    log(
        f"[{size}] {passes} idle passes: median {statistics.median(cpus) * 1000:.2f} ms of CPU, "
        f"min {min(cpus) * 1000:.2f}, {statistics.median(executes):.0f} executes each (not in the figures)"
    )


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report_profile(profiler: Any, path: str, size: int, queries: Queries, cycles: int) -> None:
    """`--profile`: the cycles' cProfile written to `path`, its top functions and the SQL by kind and table logged."""
    import pstats

    profiler.dump_stats(path)
    log(f"[{size}] cProfile of the cycles written to {path}; top functions by cumulative time:")
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)
    log(f"[{size}] SQL statements over {cycles} cycles, by kind and table:")
    for key, count in (queries.by_table or Counter()).most_common(25):
        log(f"  {count:>10}  {count / cycles:>10.1f}/cycle  {key}")
