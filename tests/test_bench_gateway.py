"""`make bench-gateway` runs end to end against Gryvia (small sizes; LiteLLM is left out, it installs from PyPI)
and prints its table; figures are not asserted."""

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
@pytest.mark.redis
def test_the_gateway_benchmark_drives_gryvia_and_prints_its_figures(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.gateway", "--targets", "direct,gryvia"]
        + ["--requests-c1", "20", "--requests-c20", "40", "--runs", "1", "--settle-s", "0.2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    rows = re.findall(r"^gryvia +stream=(no|yes) c=(1|20) +[0-9.]+ .* 0$", result.stdout, re.M)
    assert sorted(rows) == [("no", "1"), ("no", "20"), ("yes", "1"), ("yes", "20")], result.stdout
    ratios = re.findall(r"^ratio (cpu_per_request|added_p50) stream=(?:no|yes) c=(?:1|20): (.+)$", result.stdout, re.M)
    assert len(ratios) == 6, result.stdout  # n/a without LiteLLM
