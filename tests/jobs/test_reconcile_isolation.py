"""One tenant's fault stays that tenant's (issue 26, item 9; apps.jobs.reconciler.isolation), against kmock: a
ledger row inserted behind Gryvia's back makes the tenant's next sealing fail; the pass still writes everyone
else's results (another tenant's 0-GPU job starts), records the failure on the job that could not end (message and
ReconcileError event), leaves it alone until its retry is due, and ends it once the ledger is repaired."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from apps.billing.models import LedgerEntry, UsageRecord, triggers
from apps.billing.services import ledger
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.jobs.models import Job, JobEvent
from apps.jobs.reconciler import isolation, reconcile_jobs
from apps.tenants.reconciler import reconcile_tenants
from tests.billing.ledger_tools import clear_billing_history
from tests.jobs.test_queueing_flow import cluster, gpu_job  # noqa: F401 - fixtures
from tests.jobs.test_reconciler_kubernetes import _node, _set_job_status

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube2(cluster, tenant_a, tenant_b):  # noqa: F811
    clear_billing_history()
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    reconcile_tenants(backend)
    cluster.seed(_node("gpu-1", gpus=8))
    yield backend
    backend.close()
    isolation._RETRY.clear()
    clear_billing_history()


def _poison(tenant) -> LedgerEntry:
    """An entry at the head's next sequence, inserted behind Gryvia's back (the triggers refuse only UPDATE and
    DELETE)."""
    head = ledger.head_lock(tenant_id=tenant.pk)
    return LedgerEntry.all_tenants.create(
        tenant_id=tenant.pk, tenant_slug=tenant.slug, sequence=head.sequence + 1, prev_hash=head.hash,
        record_namespace=f"tenant-{tenant.slug}", record_name="rogue", record_uid=str(uuid.uuid4()), kind="external",
        start="2026-12-01T00:00:00Z", end="2026-12-01T01:00:00Z", gpu_hours="0.000000", rate="0.000000",
        cost="0.000000", currency="USD", recorded_at="2026-12-01T01:00:00Z", hash="0" * 64,
    )  # fmt: skip


def test_a_poisoned_tenant_does_not_stop_another_tenants_jobs(cluster, kube2, tenant_a, tenant_b):  # noqa: F811
    ended = gpu_job(tenant_a, "a-run", gpus=0)
    reconcile_jobs(kube2)
    ended.refresh_from_db()
    assert ended.phase == "Scheduling" and UsageRecord.all_tenants.filter(job_pk=ended.pk, final=False).exists()
    rogue = _poison(tenant_a)
    assert not ledger.verify(tenant_id=tenant_a.pk, tenant_slug=tenant_a.slug).valid  # verify_ledger sees it

    _set_job_status(cluster, "a-run", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    other = gpu_job(tenant_b, "b-run", gpus=0)
    reconcile_jobs(kube2)  # a-run's run cannot be sealed: the pass still writes the rest
    other.refresh_from_db()
    ended.refresh_from_db()
    assert other.phase == "Scheduling", other.message
    assert ended.phase == "Scheduling" and "could not be recorded (IntegrityError" in ended.message
    assert "retrying in 15 s (failure 1 in a row)" in ended.message
    assert JobEvent.objects.filter(job=ended, reason="ReconcileError", type="Warning").count() == 1

    third = gpu_job(tenant_b, "b-more", gpus=0)
    reconcile_jobs(kube2)  # its retry is not due: left alone, and the others go on
    third.refresh_from_db()
    assert third.phase == "Scheduling"
    assert JobEvent.objects.filter(job=ended, reason="ReconcileError").count() == 1

    isolation.retry_due_now()
    reconcile_jobs(kube2)  # due, and still failing: backs off longer
    ended.refresh_from_db()
    assert "retrying in 30 s (failure 2 in a row)" in ended.message

    # The operator repairs the ledger (the rogue row goes, by maintenance) and the job ends at its retry.
    triggers.drop(connection)
    try:
        LedgerEntry.all_tenants.filter(pk=rogue.pk).delete()
    finally:
        triggers.create(connection)
    isolation.retry_due_now()
    reconcile_jobs(kube2)
    ended.refresh_from_db()
    assert ended.phase == "Succeeded"
    assert UsageRecord.all_tenants.get(job_pk=ended.pk).final
    assert ledger.verify(tenant_id=tenant_a.pk, tenant_slug=tenant_a.slug).valid
    assert not isolation._RETRY
    assert Job.all_tenants.get(pk=other.pk).phase == "Scheduling"
