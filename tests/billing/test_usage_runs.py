"""Usage records of job runs: opened at admission, refreshed, final at the end (also when the job is deleted while
it runs), priced by the SKU in force, immutable once final, one per admitted run."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction

from apps.billing import services
from apps.billing.models import ImmutableError, LedgerEntry, UsageRecord
from apps.billing.selectors import run_owners
from apps.billing.services import ledger
from apps.cluster.backends.base import JOB, POD
from apps.jobs import services as job_services
from apps.jobs.models import Job
from apps.jobs.reconciler import reconcile_jobs
from tests.factories import ACTOR
from tests.jobs.factories import make_job
from tests.jobs.test_queueing_flow import cluster, gpu_job, kube, running_pod  # noqa: F401 - fixtures
from tests.jobs.test_reconciler_kubernetes import NS, _set_job_status

from .conftest import T0, make_sku

pytestmark = pytest.mark.django_db


def _phase(job: Job, phase: str, **fields) -> Job:
    Job.all_tenants.filter(pk=job.pk).update(phase=phase, **fields)
    job.refresh_from_db()
    return job


def test_a_run_is_priced_exactly_by_the_sku_in_force(clean_ledger, tenant_a):
    make_sku("h100-old", rate="9", effective_from=T0 - dt.timedelta(days=30), effective_to=T0)
    make_sku("h100", rate="2.5", effective_from=T0)
    job = make_job(tenant_a, "train", gpus=2, gpuType="H100", distributed={"enabled": False})
    services.usage_job_events(
        [(_phase(job, "Scheduling"), "Scheduled", "", "Normal")], now=T0 + dt.timedelta(seconds=1)
    )
    record = UsageRecord.all_tenants.get()
    assert (record.final, record.run, record.gpus, record.sku_name, record.rate) == (
        False,
        1,
        2,
        "h100",
        Decimal("2.5"),
    )
    assert record.name == f"usage-{job.uid}" and record.kind == "gpu"
    services.usage_job_events([(_phase(job, "Running"), "Running", "", "Normal")], now=T0 + dt.timedelta(minutes=5))
    services.usage_refresh(now=T0 + dt.timedelta(minutes=30, seconds=1))
    record.refresh_from_db()
    assert not record.final and record.gpu_hours == Decimal("1.000000") and record.cost == Decimal("2.500000")
    end = T0 + dt.timedelta(hours=1, minutes=30, seconds=1)
    job = _phase(job, "Succeeded", completion_time=end)
    services.usage_job_events([(job, "Succeeded", "done", "Normal")], now=end + dt.timedelta(seconds=30))
    record.refresh_from_db()
    assert record.final and record.end == end
    assert record.gpu_hours == Decimal("3.000000") and record.cost == Decimal("7.500000")
    entry = LedgerEntry.all_tenants.get()
    assert (entry.sequence, entry.cost, entry.gpu_hours, entry.record_uid) == (
        1,
        "7.500000",
        "3.000000",
        str(record.uid),
    )
    assert entry.start == "2026-09-03T10:00:01Z" and entry.end == "2026-09-03T11:30:01Z" and entry.sku == "h100"
    assert ledger.verify(tenant_id=tenant_a.pk, tenant_slug="alpha").valid
    # The same events again change nothing.
    services.usage_job_events([(job, "Succeeded", "done", "Normal")], now=end + dt.timedelta(hours=1))
    assert UsageRecord.all_tenants.count() == 1 and LedgerEntry.all_tenants.count() == 1


def test_cpu_jobs_pay_for_cores_and_memory_and_unpriced_types_are_still_metered(clean_ledger, tenant_a):
    make_sku("cpu", gpu_type="cpu", rate="0", cpu_core_hour_rate=Decimal("0.04"), memory_gib_hour_rate=Decimal("0.01"))
    cpu = make_job(
        tenant_a, "etl", resources={"cpu": "500m", "memory": "4Gi"}, distributed={"enabled": True, "nodes": 2}
    )
    gpu = make_job(tenant_a, "t4", gpus=1, gpuType="T4", distributed={"enabled": False})
    services.usage_job_events([(_phase(j, "Running"), "Running", "", "Normal") for j in (cpu, gpu)], now=T0)
    for job in (cpu, gpu):
        _phase(job, "Failed", completion_time=T0 + dt.timedelta(hours=2))
    services.usage_job_events([(j, "Failed", "", "Warning") for j in (cpu, gpu)], now=T0 + dt.timedelta(hours=3))
    by_job = {r.job_name: r for r in UsageRecord.all_tenants.all()}
    # 2 nodes x 0.5 cores x 2 h x 0.04 + 2 x 4 GiB x 2 h x 0.01
    assert by_job["etl"].kind == "cpu" and by_job["etl"].cost == Decimal("0.240000")
    assert by_job["t4"].sku_name == "" and by_job["t4"].gpu_hours == Decimal("2.000000") and by_job["t4"].cost == 0


def test_a_job_deleted_while_running_gets_a_final_record(clean_ledger, tenant_a, h100):
    job = make_job(tenant_a, "doomed", gpus=1, gpuType="H100", distributed={"enabled": False})
    services.usage_job_events([(_phase(job, "Running"), "Running", "", "Normal")])
    job_services.job_delete(actor=ACTOR, job=job)
    record = UsageRecord.all_tenants.get()
    assert record.final and record.end is not None and record.job_name == "doomed"
    assert LedgerEntry.all_tenants.filter(record_uid=str(record.uid)).exists()


def test_an_orphaned_open_record_is_closed_by_the_refresh(clean_ledger, tenant_a, h100):
    job = make_job(tenant_a, "gone", gpus=1, gpuType="H100", distributed={"enabled": False})
    services.usage_job_events([(_phase(job, "Running"), "Running", "", "Normal")], now=T0)
    Job.all_tenants.filter(pk=job.pk).delete()  # not through the service
    services.usage_refresh(now=T0 + dt.timedelta(hours=2))
    record = UsageRecord.all_tenants.get()
    assert record.final and record.cost == Decimal("5.000000")


def test_without_the_jobs_registry_the_refresh_says_what_is_missing(clean_ledger, tenant_a, h100, monkeypatch):
    """Billing learns which jobs exist from the registry JobsConfig.ready() fills; without it an open run is left
    open (not closed as an orphan) and the error names the app to install."""
    job = make_job(tenant_a, "kept", gpus=1, gpuType="H100", distributed={"enabled": False})
    services.usage_job_events([(_phase(job, "Running"), "Running", "", "Normal")], now=T0)
    monkeypatch.setattr(run_owners, "_job_timeouts", [])
    with pytest.raises(ImproperlyConfigured, match="apps.jobs"):
        services.usage_refresh(now=T0 + dt.timedelta(hours=2))
    assert not UsageRecord.all_tenants.get().final


def test_a_final_record_is_immutable_in_code_and_in_the_database(clean_ledger, tenant_a, h100):
    services.usage_events_ingest(
        tenant=tenant_a,
        events=[{"id": "e1", "gpu_type": "H100", "start": "2026-09-03T10:00:00Z", "end": "2026-09-03T11:00:00Z"}],
    )
    record = UsageRecord.all_tenants.get()
    record.cost = Decimal(0)
    with pytest.raises(ImmutableError):
        record.save()
    with pytest.raises(ImmutableError):
        record.delete()
    for statement in ("UPDATE billing_usagerecord SET cost = 0", "DELETE FROM billing_usagerecord"):
        with pytest.raises(IntegrityError, match="final usage record"), transaction.atomic(), connection.cursor() as c:
            c.execute(statement)
    with pytest.raises(IntegrityError), transaction.atomic():
        UsageRecord.all_tenants.update(cost=0)
    assert UsageRecord.all_tenants.get().cost == Decimal("2.500000")


def test_preemption_and_readmission_make_two_records(clean_ledger, cluster, kube, tenant_a):  # noqa: F811
    make_sku("any", gpu_type="any", rate="1")
    low = gpu_job(tenant_a, "low")
    reconcile_jobs(kube)
    _set_job_status(cluster, "low", {"active": 1, "ready": 1})
    reconcile_jobs(kube)
    running_pod(cluster, "low")
    assert UsageRecord.all_tenants.get().final is False
    high = gpu_job(tenant_a, "high", priority=50)
    reconcile_jobs(kube)  # low is preempted: its run ends
    first = UsageRecord.all_tenants.get(job_name="low")
    assert first.final and first.run == 1 and first.gpus == 2
    cluster.unseed(POD, "low-0-pod", NS)
    reconcile_jobs(kube)
    reconcile_jobs(kube)  # high admitted
    assert UsageRecord.all_tenants.get(job_name="high").final is False
    _set_job_status(cluster, "high", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    reconcile_jobs(kube)
    reconcile_jobs(kube)  # low is admitted again: a second run
    low.refresh_from_db()
    high.refresh_from_db()
    assert high.phase == "Succeeded" and low.phase == "Scheduling" and cluster.stored(JOB, "low", NS) is not None
    runs = list(UsageRecord.all_tenants.filter(job_name="low").order_by("run").values_list("run", "final", "name"))
    assert runs == [(1, True, f"usage-{low.uid}"), (2, False, f"usage-{low.uid}-2")]
    assert UsageRecord.all_tenants.get(job_name="high").final
    assert ledger.verify(tenant_id=tenant_a.pk, tenant_slug="alpha").entries == 2
