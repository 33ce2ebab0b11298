"""`make bench-admission` runs end to end (smallest size, SQLite) and prints its line; figures are not asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_admission_benchmark_prints_its_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.admission", "--sizes", "150", "--db", "sqlite", "--idle-passes", "3:5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "GRYVIA_DATA_DIR": str(tmp_path), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("jobs=150 "))
    pattern = (
        r"jobs=150 db=sqlite admissions/s=[0-9.]+ cpu_ms_per_admission=[0-9.]+ cycle_p50_ms=[0-9.]+ "
        r"cycle_p99_ms=[0-9.]+ queries_per_cycle=\d+ sim_makespan_s=[0-9.]+"
    )
    assert re.fullmatch(pattern, line), line
    # The control plane runs on the simulated clock: each finished job is collected by the pass that sees it finish.
    assert "[150] finished jobs left uncollected: 0\n" in result.stderr, result.stderr[-3000:]
    # The header names the interpreter; --idle-passes logs the fixed cost of a pass with nothing to do.
    assert re.search(
        r"^# interpreter: CPython 3\.\d+\.\d+ .*reference loop .*: [0-9.]+ ms of CPU; memory walk .*: \d+ ms of CPU$",
        result.stdout,
        re.M,
    )
    assert re.search(
        r"^\[150\] 5 idle passes: median [0-9.]+ ms of CPU, min [0-9.]+, \d+ executes each", result.stderr, re.M
    )
