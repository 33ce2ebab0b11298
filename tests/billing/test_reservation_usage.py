"""Reservations billed as usage: the GPUs claimed for a reservation × the time it holds them, at the SKU in force;
a new record when the claims change and at each month's start; final (and sealed) at the window's end or when the
reservation is deleted; jobs on the reserved GPUs not billed twice; the reservation reconciler drives it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.billing import services
from apps.billing.models import LedgerEntry, UsageRecord
from apps.billing.selectors import pricing
from apps.jobs.models import Job
from apps.queueing import services as queueing
from apps.queueing.models import GpuNode, Reservation
from apps.queueing.placement import RESERVED_KEY
from apps.queueing.reservations import reconcile_reservations
from tests.factories import ACTOR
from tests.jobs.factories import make_job
from tests.queueing.test_reservations import cluster, gpu_node, kube  # noqa: F401 - fixtures

from .conftest import T0, make_sku

pytestmark = pytest.mark.django_db
H = dt.timedelta(hours=1)
M = dt.timedelta(minutes=1)


def reservation(tenant, *, start=T0, hours=10, count=4, claimed=8, claimed_at=None) -> Reservation:
    made = queueing.reservation_create(
        actor=ACTOR, tenant=tenant, gpu_type="H100", count=count, start_at=start, end_at=start + hours * H
    )
    return claim(made, claimed, claimed_at or start)


def claim(reservation: Reservation, gpus: int, at: dt.datetime) -> Reservation:
    """What the reservation reconciler writes when the nodes it claimed for it change."""
    Reservation.all_tenants.filter(pk=reservation.pk).update(status_claimed_gpus=gpus, status_updated_at=at)
    reservation.refresh_from_db()
    return reservation


def records(reservation) -> list[UsageRecord]:
    return list(UsageRecord.all_tenants.filter(reservation_pk=reservation.pk).order_by("run"))


def test_claimed_gpus_are_billed_for_the_time_they_are_held(tenant_a):
    make_sku(rate="2.5")
    reserved = reservation(tenant_a, claimed_at=T0 + 5 * M)  # 4 reserved, 8 claimed (whole nodes)
    assert services.usage_reservations_sync(now=T0 - M) == 0  # not started: nothing
    assert services.usage_reservations_sync(now=T0 + H) == 1
    [first] = records(reserved)
    assert (first.kind, first.name, first.job_name, first.final) == (
        "reservation",
        f"reservation-{reserved.pk}",
        f"reservation:{reserved.pk}",
        False,
    )
    assert (first.start, first.gpus, first.sku_name, first.rate) == (T0 + 5 * M, 8, "h100", Decimal("2.5"))
    assert (first.gpu_hours, first.cost) == (Decimal("7.333333"), Decimal("18.333333"))  # 8 GPUs x 55 min

    claim(reserved, 4, T0 + 2 * H)  # a node given back
    assert services.usage_reservations_sync(now=T0 + 2 * H + M) == 2
    first, second = records(reserved)
    assert first.final and first.end == T0 + 2 * H
    assert (first.gpu_hours, first.cost) == (Decimal("15.333333"), Decimal("38.333333"))  # 8 GPUs x 1 h 55 min
    assert (second.run, second.name, second.start, second.gpus, second.final) == (
        2,
        f"reservation-{reserved.pk}-2",
        T0 + 2 * H,
        4,
        False,
    )

    assert services.usage_reservations_sync(now=T0 + 11 * H) == 1  # the window ended at T0 + 10 h
    second.refresh_from_db()
    assert second.final and second.end == T0 + 10 * H
    assert (second.gpu_hours, second.cost) == (Decimal("32.000000"), Decimal("80.000000"))  # 4 GPUs x 8 h
    entries = LedgerEntry.all_tenants.filter(kind="reservation").order_by("sequence")
    assert [(e.job, e.gpu_hours, e.cost) for e in entries] == [
        (f"reservation:{reserved.pk}", "15.333333", "38.333333"),
        (f"reservation:{reserved.pk}", "32.000000", "80.000000"),
    ]
    assert services.usage_reservations_sync(now=T0 + 12 * H) == 0


def test_a_deleted_reservation_is_billed_until_its_deletion(tenant_a):
    make_sku(rate="2.5")
    now = timezone.now().replace(microsecond=0)
    reserved = reservation(tenant_a, start=now - H, hours=5)
    services.usage_reservations_sync(now=now)
    queueing.reservation_delete(actor=ACTOR, reservation=reserved)
    [record] = UsageRecord.all_tenants.filter(kind="reservation")
    assert record.final and now <= record.end <= timezone.now() and record.start == now - H
    assert record.cost == pricing.q6(pricing.hours_between(record.start, record.end) * 8 * Decimal("2.5"))
    assert LedgerEntry.all_tenants.filter(record_uid=str(record.uid)).exists()


def test_a_record_is_split_at_the_start_of_each_month(tenant_a):
    make_sku(rate="2.5")
    september = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
    reserved = reservation(tenant_a, start=september - 2 * H, hours=6)
    services.usage_reservations_sync(now=september - H)
    services.usage_reservations_sync(now=september + 30 * M)
    august, current = records(reserved)
    assert (august.start, august.end, august.final, august.cost) == (
        september - 2 * H,
        september,
        True,
        Decimal("40.000000"),  # 8 GPUs x 2 h x 2.50
    )
    assert (current.start, current.final, current.gpus) == (september, False, 8)


def test_jobs_on_reserved_gpus_are_not_billed_twice(tenant_a):
    make_sku(rate="2.5")
    GpuNode.objects.create(name="h100-b", gpu_type="H100", gpu_count=8, labels={RESERVED_KEY: "alpha"})
    reserved = reservation(tenant_a, start=T0 - H, hours=3)  # until T0 + 2 h
    services.usage_reservations_sync(now=T0)
    job = make_job(tenant_a, "on-reserved", gpus=2, gpuType="H100", distributed={"enabled": False})
    Job.all_tenants.filter(pk=job.pk).update(phase="Running", placement={"nodes": ["h100-b"], "reserved": True})
    job.refresh_from_db()
    services.usage_job_events([(job, "Running", "", "Normal")], now=T0)
    services.usage_refresh(now=T0 + H)
    run = UsageRecord.all_tenants.get(job_pk=job.pk)
    assert (run.gpus, run.reserved_gpus, run.gpu_hours, run.cost) == (2, 2, Decimal(0), Decimal(0))

    # The reservation ends while the job runs on: from then on the run is billed in full, in a new record.
    services.usage_reservations_sync(now=T0 + 3 * H)
    run.refresh_from_db()
    assert run.final and run.end == T0 + 2 * H and run.cost == 0
    services.usage_refresh(now=T0 + 3 * H)
    after = UsageRecord.all_tenants.get(job_pk=job.pk, final=False)
    assert (after.run, after.name, after.start, after.reserved_gpus) == (2, f"usage-{job.uid}-2", T0 + 2 * H, 0)
    assert (after.gpu_hours, after.cost) == (Decimal("2.000000"), Decimal("5.000000"))  # 2 GPUs x 1 h
    assert records(reserved)[0].end == T0 + 2 * H


def test_the_reservation_reconciler_keeps_the_records_in_step(cluster, kube, tenant_a):  # noqa: F811
    make_sku(rate="2.5")
    cluster.seed(gpu_node("h100-b"))
    cluster.seed(gpu_node("h100-c"))
    start = timezone.now().replace(microsecond=0) - M
    made = queueing.reservation_create(
        actor=ACTOR, tenant=tenant_a, gpu_type="H100", count=16, start_at=start, end_at=start + 4 * H
    )
    reconcile_reservations(kube)
    [first] = records(made)
    made.refresh_from_db()
    assert (first.gpus, first.final, first.start) == (16, False, made.status_updated_at.replace(microsecond=0))
    queueing.reservation_update(actor=ACTOR, reservation=made, count=8)
    reconcile_reservations(kube)
    first, second = records(made)
    assert first.final and (second.gpus, second.final, second.start) == (8, False, first.end)
    reconcile_reservations(kube, now=made.end_at)
    second.refresh_from_db()
    assert second.final and second.end == made.end_at
    hours = pricing.q6(8 * pricing.hours_between(second.start, second.end))
    assert (second.gpu_hours, second.cost) == (hours, pricing.q6(hours * Decimal("2.5")))
