"""The CLI prints what the API says went wrong: its own message for a body over the server's size limit, and a
hint when the 413 comes from something in front of the server, without the API's envelope."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import make_key, make_tenant

from .conftest import Run
from .standin import Answer, StandIn

MANIFEST = """apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata:
  name: big
spec:
  type: training
  image: busybox
  command: [echo, "{filler}"]
"""


@pytest.mark.django_db(transaction=True)
def test_a_manifest_over_the_servers_limit_prints_the_limit_and_the_variable(
    live_server, cli: Run, settings, tmp_path: Path
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    key = make_key(make_tenant("cli-big"))
    manifest = tmp_path / "big.yaml"
    manifest.write_text(MANIFEST.format(filler="x" * 5000))
    result = cli("--url", live_server.url, "--api-key", key, "jobs", "submit", "-f", str(manifest))
    assert result.code == 1
    assert "4096 bytes" in result.err and "GRYVIA_MAX_BODY_BYTES" in result.err, result.err


def test_a_413_without_the_envelope_says_the_body_is_too_large(standin: StandIn, cli: Run, tmp_path: Path):
    standin.add("POST", "/api/v1/jobs/", Answer(413, text="<html>Request Entity Too Large</html>"))
    manifest = tmp_path / "job.yaml"
    manifest.write_text(MANIFEST.format(filler="x"))
    result = cli("--url", standin.url, "--api-key", "gry_k_s", "jobs", "submit", "-f", str(manifest))
    assert result.code == 1
    assert "HTTP 413" in result.err and "larger than the server, or a proxy in front of it, accepts" in result.err
