"""`gryvia budgets` and `gryvia jobs release` against the real app (live server)."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from apps.billing import services
from apps.billing.selectors import spend
from apps.jobs.models import Job
from tests.cli.conftest import Run, cli  # noqa: F401 - the fixture
from tests.factories import make_key, make_tenant
from tests.jobs.factories import make_job

from .conftest import make_sku


@pytest.mark.django_db(transaction=True)
def test_budgets_round_trip_and_release(live_server, cli: Run):  # noqa: F811
    tenant = make_tenant("cli-bud")
    admin = make_key(tenant, ["admin"])
    reader = make_key(tenant, ["billing:read"])
    platform = make_key(tenant, ["admin"], platform=True)
    base = ("--url", live_server.url)
    make_sku()
    start = spend.month_of(timezone.now())[0]
    event = {"id": "e1", "gpu_type": "H100", "gpus": 2, "start": start.isoformat(), "end": start.isoformat()}
    services.usage_events_ingest(tenant=tenant, events=[event])

    made = cli(*base, "--api-key", admin, "budgets", "create", "team", "--amount", "500", "--hard-limit")
    assert made.code == 0, made.err
    assert "budget/team created: 0.00 of 500.00 USD spent (0.00 %)" in made.out
    bad = cli(*base, "--api-key", admin, "budgets", "create", "bad", "--amount", "-1")
    assert bad.code != 0 and "amount" in bad.err
    refused = cli(*base, "--api-key", reader, "budgets", "create", "mine", "--amount", "5")
    assert refused.code != 0

    listed = cli(*base, "--api-key", reader, "budgets", "list")
    assert listed.code == 0, listed.err
    row = listed.out.splitlines()[1].split()
    assert row[:5] == ["team", "cli-bud", "monthly", "500.000000", "USD"] and row[-3:] == ["ok", "yes", "-"]
    assert "forecast cli-bud: 0.000000 USD" in listed.out and "budget team: 0.00% of 500.000000 (within)" in listed.out
    shown = cli(*base, "--api-key", reader, "budgets", "show", "team", "-o", "json")
    assert json.loads(shown.out)["hard_limit"] is True
    forecast = cli(*base, "--api-key", reader, "budgets", "forecast", "-o", "json")
    assert [t["tenant"] for t in json.loads(forecast.out)["tenants"]] == ["cli-bud"]

    job = make_job(tenant, "held")
    Job.all_tenants.filter(pk=job.pk).update(phase="Queued", reason="BudgetExceeded", message="held by budget team")
    denied = cli(*base, "--api-key", admin, "jobs", "release", "held")
    assert denied.code != 0 and "platform staff" in denied.err
    released = cli(*base, "--api-key", platform, "--tenant", "cli-bud", "jobs", "release", "held")
    assert released.code == 0 and "job/held released from its budget hold (phase Queued)" in released.out
    assert Job.all_tenants.get(pk=job.pk).budget_released_at is not None

    deleted = cli(*base, "--api-key", admin, "budgets", "delete", "team", "--yes")
    assert deleted.code == 0 and "budget/team deleted" in deleted.out
