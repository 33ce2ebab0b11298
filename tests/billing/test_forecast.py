"""Month-end forecast: this month's spend so far plus open runs and reservations extrapolated to their timeout, their
window's end or the month's end, whichever comes first; exact numbers; tenant-scoped over REST."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.billing import selectors, services
from apps.billing.selectors import spend
from apps.jobs import services as job_services
from apps.jobs.models import Job
from apps.queueing import services as queueing
from apps.queueing.models import Reservation
from tests.factories import ACTOR, client_for, make_key
from tests.jobs.factories import spec

from .conftest import T0, make_sku

pytestmark = pytest.mark.django_db
H = dt.timedelta(hours=1)


def running(tenant, name: str, gpus: int, timeout: str | None):
    document = spec(gpus=gpus, gpuType="H100", timeout=timeout, distributed={"enabled": False})
    if timeout is None:
        del document["timeout"]
    job = job_services.job_create(actor=ACTOR, tenant=tenant, name=name, spec=document)
    Job.all_tenants.filter(pk=job.pk).update(phase="Running")
    job.refresh_from_db()
    services.usage_job_events([(job, "Running", "", "Normal")], now=T0)
    return job


def test_the_month_end_forecast_in_exact_numbers(tenant_a, tenant_b):
    make_sku(rate="2.5")
    now = T0 + H  # 2026-09-03 11:00 UTC
    event = {"id": "e1", "gpu_type": "H100", "gpus": 2, "start": "2026-09-02T10:00:00Z", "end": "2026-09-02T11:00:00Z"}
    services.usage_events_ingest(tenant=tenant_a, events=[event])  # 5.00, final
    running(tenant_a, "timed", gpus=2, timeout="4h")  # 5.00 so far; 3 h more until its timeout: 15.00
    running(tenant_a, "open-ended", gpus=1, timeout=None)  # 2.50 so far; 661 h more until Oct 1: 1652.50
    reserved = queueing.reservation_create(
        actor=ACTOR, tenant=tenant_a, gpu_type="H100", count=8, start_at=T0, end_at=T0 + 5 * H
    )
    Reservation.all_tenants.filter(pk=reserved.pk).update(status_claimed_gpus=8, status_updated_at=T0)
    services.usage_reservations_sync(now=T0)  # 20.00 so far; 4 h more: 80.00
    services.budget_create(actor=ACTOR, tenant=tenant_a, name="monthly", amount=Decimal("2000"))
    services.usage_events_ingest(tenant=tenant_b, events=[{**event, "id": "b1"}])

    forecast = selectors.month_end_forecast(tenants=[tenant_a], now=now)
    assert (forecast.start, forecast.end) == spend.month_of(now)
    [alpha] = forecast.tenants
    assert (alpha.tenant, alpha.currency) == ("alpha", "USD")
    assert (alpha.spent, alpha.running, alpha.projected) == (
        Decimal("32.500000"),
        Decimal("1747.500000"),
        Decimal("1780.000000"),
    )
    assert [(r.job, r.until, r.cost) for r in alpha.runs] == [
        ("open-ended", dt.datetime(2026, 10, 1, tzinfo=dt.UTC), Decimal("1652.500000")),
        (f"reservation:{reserved.pk}", T0 + 5 * H, Decimal("80.000000")),
        ("timed", T0 + 4 * H, Decimal("15.000000")),
    ]
    [monthly] = alpha.budgets
    assert (monthly.name, monthly.projected_percent, monthly.sufficient) == ("monthly", Decimal("89.00"), True)


def test_forecast_over_rest_is_scoped_to_the_callers_tenant(tenant_a, tenant_b, platform_key):
    make_sku(rate="2.5")
    start = spend.month_of(timezone.now())[0]
    event = {
        "id": "e1",
        "gpu_type": "H100",
        "gpus": 2,
        "start": start.isoformat(),
        "end": (start + dt.timedelta(minutes=1)).isoformat(),
    }
    services.usage_events_ingest(tenant=tenant_a, events=[event])  # 2 GPUs x 1 min x 2.50 = 0.083333
    services.usage_events_ingest(tenant=tenant_b, events=[{**event, "gpus": 4}])
    body = client_for(make_key(tenant_a, ["billing:read"])).get("/api/v1/usage/forecast/").json()
    assert [(t["tenant"], t["spent"], t["running"], t["projected"]) for t in body["tenants"]] == [
        ("alpha", "0.083333", "0.000000", "0.083333")
    ]
    assert client_for(make_key(tenant_a, ["jobs:read"])).get("/api/v1/usage/forecast/").status_code == 403
    both = client_for(platform_key).get("/api/v1/usage/forecast/").json()
    assert [(t["tenant"], t["spent"]) for t in both["tenants"]] == [
        ("alpha", "0.083333"),
        ("bravo", "0.166668"),
    ]  # 0.066667 GPU-h x 2.50
    only = client_for(platform_key).get("/api/v1/usage/forecast/?tenant=bravo").json()
    assert [t["tenant"] for t in only["tenants"]] == ["bravo"]
