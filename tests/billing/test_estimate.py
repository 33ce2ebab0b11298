"""Cost estimate before submission: `POST /api/v1/jobs/estimate/` and `gryvia jobs estimate -f`."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from apps.jobs.models import Job
from tests.cli.conftest import Run, cli  # noqa: F401 - the fixture
from tests.factories import client_for, make_key, make_tenant

from .conftest import make_sku

pytestmark = pytest.mark.django_db
ESTIMATE = "/api/v1/jobs/estimate/"


@pytest.fixture
def catalog(db):
    make_sku("h100", "H100", "2.5", cpu_core_hour_rate="0.04")
    make_sku("a100", "A100", "1.8")
    make_sku("l40s", "L40S", "1.2")
    make_sku("gpu-any", "any", "2.0")
    make_sku("cpu", "cpu", "0", cpu_core_hour_rate="0.05", memory_gib_hour_rate="0.01")
    make_sku("mi300-eur", "MI300", "0.5", currency="EUR")  # another currency: never compared


def _job(**spec) -> dict:
    return {"name": "train", "spec": {"type": "training", "image": "pytorch:2", **spec}}


def test_a_gpu_job_is_priced_at_its_sku_for_its_timeout_and_the_cheapest_type_is_named(catalog, client_a):
    answer = client_a.post(ESTIMATE, _job(gpus=2, gpuType="H100", timeout="2h", resources={"cpu": "4"}), format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    # 2 GPUs × 2 h × 2.50 + 4 cores × 2 h × 0.04: the H100 SKU's core rate applies as it would to the run.
    assert (body["sku"], body["gpu_type"], body["gpus"], body["gpu_hours"]) == ("h100", "H100", 2, "4.000000")
    assert (body["cost"], body["currency"], body["rate"]) == ("10.320000", "USD", "2.500000")
    assert (body["duration_seconds"], body["duration_source"], body["tenant"]) == (7200, "timeout", "alpha")
    assert body["cheapest"] == {"gpu_type": "L40S", "sku": "l40s", "rate": "1.200000", "cost": "4.800000",
                                "currency": "USD"}  # fmt: skip
    assert body["alternative"]["gpu_type"] == "L40S"
    assert "cheapest: 2 × L40S at 4.800000 USD" in body["message"]
    assert not Job.all_tenants.exists()  # an estimate submits nothing


def test_the_cheapest_type_is_the_jobs_own_then_the_cheapest_other_type_is_priced(catalog, client_a):
    body = client_a.post(ESTIMATE, _job(gpus=1, gpuType="l40s", timeout="1h"), format="json").json()
    assert (body["sku"], body["cost"], body["cheapest"]["gpu_type"]) == ("l40s", "1.200000", "L40S")
    assert (body["alternative"]["gpu_type"], body["alternative"]["cost"]) == ("A100", "1.800000")
    assert "the cheapest other type, A100, would cost 1.800000 USD" in body["message"]


def test_a_distributed_job_counts_the_whole_gang_and_no_type_is_priced_at_any(catalog, client_a):
    spec = {"distributed": {"enabled": True, "nodes": 2, "gpusPerNode": 4}, "timeout": "30m"}
    body = client_a.post(ESTIMATE, _job(**spec), format="json").json()
    assert (body["gpus"], body["gpu_type"], body["sku"], body["cost"]) == (8, "any", "gpu-any", "8.000000")
    assert body["cheapest"]["cost"] == "4.800000" and body["alternative"] is None


def test_a_cpu_job_is_priced_by_the_cpu_skus_core_and_memory_rates(catalog, client_a):
    spec = {"resources": {"cpu": "2", "memory": "4Gi"}, "timeout": "3h"}
    body = client_a.post(ESTIMATE, _job(**spec), format="json").json()
    # 2 cores × 3 h × 0.05 + 4 GiB × 3 h × 0.01
    assert (body["gpu_type"], body["sku"], body["cpu_cores"], body["memory_gib"]) == ("cpu", "cpu", "2.000", "4.000")
    assert (body["cost"], body["cheapest"], body["alternative"]) == ("0.420000", None, None)


def test_without_a_timeout_the_default_duration_is_used(catalog, client_a, settings):
    settings.GRYVIA_BILLING_DEFAULT_DURATION_S = 1800
    body = client_a.post(ESTIMATE, _job(gpus=1, gpuType="A100"), format="json").json()
    assert (body["duration_seconds"], body["duration_source"], body["cost"]) == (1800, "default", "0.900000")
    assert "default duration" in body["message"]


def test_only_prices_in_force_now_count(client_a):
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    make_sku("h100-old", "H100", "9", effective_from=now - dt.timedelta(days=30), effective_to=now)
    make_sku("h100-new", "H100", "3", effective_from=now)
    make_sku("a100-later", "A100", "0.1", effective_from=now + dt.timedelta(days=1))
    body = client_a.post(ESTIMATE, _job(gpus=1, gpuType="H100", timeout="1h"), format="json").json()
    assert (body["sku"], body["cost"], body["alternative"]) == ("h100-new", "3.000000", None)


def test_without_a_sku_in_force_the_job_is_metered_at_cost_zero(client_a):
    body = client_a.post(ESTIMATE, _job(gpus=1, gpuType="B200", timeout="1h"), format="json").json()
    assert (body["sku"], body["cost"], body["cheapest"]) == (None, "0.000000", None)
    assert "no SKU of type 'B200' is in force" in body["message"]


def test_a_manifest_without_a_name_is_priced_too(catalog, client_a):
    manifest = "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata: {}\nspec:\n  type: training\n" \
               "  image: x\n  gpus: 1\n  gpuType: A100\n  timeout: 1h\n"  # fmt: skip
    answer = client_a.post(ESTIMATE, manifest, content_type="application/yaml")
    assert answer.status_code == 200, answer.content
    assert answer.json()["cost"] == "1.800000"


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (_job(gpus=-1), "spec.gpus"),
        (_job(timeout="soon"), "spec.timeout"),
        (_job(resources={"cpu": "lots"}), "spec.resources.cpu"),
        ({"name": "train"}, "spec"),
        ({"name": "Bad_Name", "spec": {"type": "training", "image": "x"}}, "name"),
        ({"name": "train", "spec": {"image": "x"}}, "spec.type"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(catalog, client_a, document, field):
    answer = client_a.post(ESTIMATE, document, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["fields"], answer.json()


def test_jobs_read_is_enough_and_other_scopes_are_refused(catalog, tenant_a):
    viewer = client_for(make_key(tenant_a, ["jobs:read"]))
    assert viewer.post(ESTIMATE, _job(gpus=1, timeout="1h"), format="json").status_code == 200
    billing_only = client_for(make_key(tenant_a, ["billing:read"]))
    assert billing_only.post(ESTIMATE, _job(gpus=1, timeout="1h"), format="json").status_code == 403
    assert client_for().post(ESTIMATE, _job(gpus=1, timeout="1h"), format="json").status_code == 401


def test_the_estimate_is_tenant_scoped(catalog, tenant_a, tenant_b):
    platform = client_for(make_key(tenant_a, ["admin"], platform=True))
    unnamed = platform.post(ESTIMATE, _job(gpus=1, timeout="1h"), format="json")
    assert unnamed.status_code == 400 and "tenant" in unnamed.json()["error"]["fields"]
    named = client_for(make_key(tenant_a, ["admin"], platform=True), HTTP_X_GRYVIA_TENANT=tenant_b.slug)
    assert named.post(ESTIMATE, _job(gpus=1, timeout="1h"), format="json").json()["tenant"] == tenant_b.slug
    outsider = client_for(make_key(tenant_a, ["jobs:read"]), HTTP_X_GRYVIA_TENANT=tenant_b.slug)
    assert outsider.post(ESTIMATE, _job(gpus=1, timeout="1h"), format="json").status_code == 404


def test_estimate_is_not_a_job_name(client_a):
    answer = client_a.post("/api/v1/jobs/", _job() | {"name": "estimate"}, format="json")
    assert answer.status_code == 400 and "reserved" in answer.json()["error"]["fields"]["name"][0]


@pytest.mark.django_db(transaction=True)
def test_cli_estimate_prints_the_cost_and_the_cheapest_type(live_server, cli: Run, tmp_path):  # noqa: F811
    tenant = make_tenant("cli-est")
    key = make_key(tenant, ["jobs:read"])
    make_sku("h100", "H100", "2.5")
    make_sku("l40s", "L40S", "1.2")
    (tmp_path / "job.yaml").write_text(
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata:\n  name: train\nspec:\n  type: training\n"
        "  image: pytorch:2\n  gpus: 2\n  gpuType: H100\n  timeout: 2h\n---\n"
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata:\n  name: bad\nspec:\n  type: training\n"
        "  image: pytorch:2\n  gpus: -3\n"
    )
    base = ("--url", live_server.url, "--api-key", key)
    shown = cli(*base, "jobs", "estimate", "-f", str(tmp_path / "job.yaml"))
    assert shown.code == 1  # one of the two manifests could not be priced
    header, row = shown.out.splitlines()[:2]
    assert header.split()[:3] == ["JOB", "GPUS", "GPU"]
    assert row.split()[:7] == ["train", "2", "H100", "7200s", "h100", "10.000000", "USD"]
    assert "cheapest: 2 × L40S at 4.800000 USD" in shown.out
    assert "bad" in shown.err and "spec.gpus" in shown.err
    (tmp_path / "one.yaml").write_text((tmp_path / "job.yaml").read_text().split("---")[0])
    as_json = cli(*base, "jobs", "estimate", "-f", str(tmp_path / "one.yaml"), "-o", "json")
    assert as_json.code == 0, as_json.err
    assert json.loads(as_json.out)["cheapest"]["gpu_type"] == "L40S"
    assert not Job.all_tenants.exists()
