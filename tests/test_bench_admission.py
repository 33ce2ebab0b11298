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
    # The machine's speed again after the size's cycles, on its own line after the size's.
    after = r"^# jobs=150: the machine after it: reference loop .*: [0-9.]+ ms of CPU; memory walk .*: \d+ ms of CPU$"
    assert re.search(after, result.stdout, re.M), result.stdout
    assert result.stdout.index(line) < re.search(after, result.stdout, re.M).start()
    assert re.search(
        r"^\[150\] 5 idle passes: median [0-9.]+ ms of CPU, min [0-9.]+, \d+ executes each", result.stderr, re.M
    )


@pytest.mark.slow
def test_the_paired_benchmark_runs_a_base_revision_beside_this_checkout(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.pair", "--base", "HEAD", "--sizes", "150", "--pairs", "2", "--db", "sqlite"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "GRYVIA_DATA_DIR": str(tmp_path), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pairs = re.findall(
        r"^pair=(\d) jobs=150 cpu_ms_per_admission base=([0-9.]+) new=([0-9.]+) ratio=([0-9.]+)$", result.stdout, re.M
    )
    assert [p[0] for p in pairs] == ["1", "2"], result.stdout
    for _number, base, new, ratio in pairs:
        assert float(ratio) == pytest.approx(float(new) / float(base), abs=0.01)
    assert re.search(r"^jobs=150 pairs=2 ratio_new_over_base_mean=[0-9.]+$", result.stdout, re.M), result.stdout
    # The base's worktree is gone again.
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "gryvia-pair-" not in worktrees


def test_the_paired_benchmark_refuses_an_unknown_base():
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.pair", "--base", "no-such-revision-anywhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "--base: 'no-such-revision-anywhere' is not a revision of this repository" in result.stderr
