"""`gryvia catalog` and `gryvia usage` against the real app (live server)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from apps.billing import services
from tests.cli.conftest import Run, cli  # noqa: F401 - the fixture
from tests.factories import make_key, make_tenant

SKU = """\
apiVersion: gryvia.io/v1alpha1
kind: GryviaGpuSku
metadata:
  name: h100
spec:
  gpuType: H100
  hourlyRate: "2.5"
  effectiveFrom: "2026-01-01T00:00:00Z"
"""


@pytest.mark.django_db(transaction=True)
def test_catalog_and_usage_round_trip(live_server, cli: Run, tmp_path):  # noqa: F811
    tenant = make_tenant("cli-bill")
    platform = make_key(tenant, ["admin"], platform=True)
    key = make_key(tenant, ["billing:read"])
    (tmp_path / "sku.yaml").write_text(SKU)
    base = ("--url", live_server.url)
    applied = cli(*base, "--api-key", platform, "catalog", "apply", "-f", str(tmp_path / "sku.yaml"))
    assert applied.code == 0, applied.err
    assert "gpusku/h100 created" in applied.out
    (tmp_path / "sku.yaml").write_text(SKU.replace("  gpuType: H100\n", "  gpuType: H100\n  description: on-demand\n"))
    again = cli(*base, "--api-key", platform, "catalog", "apply", "-f", str(tmp_path / "sku.yaml"))
    assert "gpusku/h100 configured" in again.out, again.err
    listed = cli(*base, "--api-key", key, "catalog", "list")
    assert listed.code == 0 and listed.out.splitlines()[1].split()[:4] == ["h100", "H100", "2.500000", "USD"]
    refused = cli(*base, "--api-key", key, "catalog", "apply", "-f", str(tmp_path / "sku.yaml"))
    assert refused.code != 0

    event = {"id": "e1", "gpu_type": "H100", "gpus": 2, "start": "2026-09-03T10:00:00Z", "end": "2026-09-03T11:00:00Z"}
    services.usage_events_ingest(tenant=tenant, events=[{**event, "job": "train"}])
    window = ("--start", "2026-09-01", "--end", "2026-09-30")
    shown = cli(*base, "--api-key", key, "usage", *window, "--group-by", "job", "-o", "json")
    assert shown.code == 0, shown.err
    assert [(r["job"], r["cost"]) for r in json.loads(shown.out)["results"]] == [("train", "5.000000")]
    text = cli(*base, "--api-key", key, "usage", *window, "--group-by", "job")
    assert "total: 5.000000 USD" in text.out
    exported = cli(*base, "--api-key", key, "usage", *window, "--group-by", "job", "--csv")
    assert list(csv.DictReader(io.StringIO(exported.out)))[0]["gpu_hours"] == "2.000000"
    deleted = cli(*base, "--api-key", platform, "catalog", "delete", "h100", "--yes")
    assert deleted.code != 0 and "priced usage" in deleted.err
