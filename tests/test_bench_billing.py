"""`make bench-billing` runs end to end at a small size on PostgreSQL and prints both lines (figures not asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.postgres
def test_the_billing_benchmark_prints_both_lines(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "GRYVIA_DATA_DIR": str(tmp_path), "HOME": str(tmp_path)}
    if os.environ.get("GRYVIA_BENCH_PG_URL"):
        env["GRYVIA_BENCH_PG_URL"] = os.environ["GRYVIA_BENCH_PG_URL"]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.billing", "--events", "600", "--batch", "250"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(re.fullmatch(r"ledger_verify entries/s=\d+ entries=600 valid=1", line) for line in lines), lines
    ingest = next(line for line in lines if line.startswith("usage_ingest "))
    expected = r"usage_ingest events/s=\d+ cpu_us_per_event=[\d.]+ durable=1 events=600 batch=250 stored=600 sealed=600"
    assert re.match(expected, ingest), ingest
