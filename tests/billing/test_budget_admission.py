"""Hard budgets in the job reconciler's admission cycle (against kmock): a new job whose forecast would break one is
held with the reason; running jobs' forecasts count against the room, and a job that ends counts what it ran from
the pass it ends in on; a platform admin's release is audited and the job then runs; and what it costs the cycle:
two queries while a hard budget exists, none otherwise."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing import services
from apps.billing.models import Budget, UsageRecord
from apps.core.models import AuditEntry
from apps.jobs.models import Job, JobEvent
from apps.jobs.reconciler import reconcile_jobs
from tests.factories import ACTOR, client_for, make_key
from tests.jobs.test_queueing_flow import cluster, gpu_job, kube  # noqa: F401 - fixtures
from tests.jobs.test_reconciler_kubernetes import _set_job_status

from .conftest import make_sku

pytestmark = pytest.mark.django_db


def hard_budget(tenant, amount: str):
    return services.budget_create(
        actor=ACTOR, tenant=tenant, name="team-a-monthly", amount=Decimal(amount), hard_limit=True
    )


def test_a_hard_budget_holds_a_new_job_until_a_platform_admin_releases_it(kube, tenant_a, platform_key):  # noqa: F811
    make_sku("gpu", gpu_type="any", rate="2.5")
    hard_budget(tenant_a, "10")
    job = gpu_job(tenant_a, "big", gpus=2, timeout="4h")  # forecast 2 GPUs x 4 h x 2.50 = 20.00
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert (job.phase, job.reason) == ("Queued", "BudgetExceeded")
    assert job.message == "held by budget team-a-monthly: forecast 20.00 USD exceeds the 10.00 USD left of 10.00 USD"
    shown = client_for(make_key(tenant_a, ["jobs:read"])).get("/api/v1/jobs/big/").json()["status"]
    assert shown["reason"] == "BudgetExceeded" and shown["message"].startswith("held by budget team-a-monthly")
    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Queued" and job.reason == "BudgetExceeded"  # still held

    tenant_admin = client_for(make_key(tenant_a, ["admin"]))
    refused = tenant_admin.post("/api/v1/jobs/big/release/")
    assert refused.status_code == 403 and "platform staff" in refused.json()["error"]["message"]
    released = client_for(platform_key).post("/api/v1/jobs/big/release/", HTTP_X_GRYVIA_TENANT="alpha")
    assert released.status_code == 200, released.content
    assert released.json()["status"]["budgetReleasedAt"]
    audit = AuditEntry.all_tenants.get(action="job.budget_release")
    assert audit.object_id == "big" and audit.tenant_id == tenant_a.pk and audit.actor.startswith("key:")
    assert audit.before["reason"] == "BudgetExceeded" and audit.after["budget_released_at"]
    event = JobEvent.objects.get(job=job, reason="BudgetReleased")
    assert event.message.startswith(f"released from its budget hold by {audit.actor}")

    reconcile_jobs(kube)
    job.refresh_from_db()
    assert job.phase == "Scheduling"  # admission ignores the budget for it now
    again = client_for(platform_key).post("/api/v1/jobs/big/release/", HTTP_X_GRYVIA_TENANT="alpha")
    assert again.status_code == 409  # admitted: nothing to release


def test_running_jobs_forecasts_take_room_from_later_ones(kube, tenant_a):  # noqa: F811
    make_sku("gpu", gpu_type="any", rate="2.5")
    hard_budget(tenant_a, "12")
    first = gpu_job(tenant_a, "first", gpus=1, timeout="4h")  # 10.00: fits the 12.00
    reconcile_jobs(kube)
    first.refresh_from_db()
    assert first.phase == "Scheduling"
    # The quota has room for a second 1-GPU job, but the budget has 2.00 left after the first one's forecast.
    second = gpu_job(tenant_a, "second", gpus=1, timeout="1h")  # 2.50
    reconcile_jobs(kube)
    second.refresh_from_db()
    assert (second.phase, second.reason) == ("Queued", "BudgetExceeded")
    assert second.message.endswith("forecast 2.50 USD exceeds the 2.00 USD left of 12.00 USD")
    cheap = gpu_job(tenant_a, "cheap", gpus=1, timeout="30m")  # 1.25: fits what is left
    reconcile_jobs(kube)
    cheap.refresh_from_db()
    assert cheap.phase == "Scheduling"


def test_the_cycle_costs_one_query_more_with_a_hard_budget_and_none_without(kube, tenant_a):  # noqa: F811
    make_sku("gpu", gpu_type="any", rate="2.5")
    for name in ("held-1", "held-2", "held-3"):
        gpu_job(tenant_a, name, gpus=2, timeout="10h")

    def steady_pass() -> list[str]:
        reconcile_jobs(kube)  # settles what changed
        reconcile_jobs(kube)  # reads again what the first one wrote of the small cached tables (GPU nodes)
        with CaptureQueriesContext(connection) as queries:
            reconcile_jobs(kube)
        return [q["sql"] for q in queries]

    without = steady_pass()
    soft = services.budget_create(actor=ACTOR, tenant=tenant_a, name="soft", amount=Decimal("1"))
    with_soft = steady_pass()
    assert not [q for q in with_soft if "billing_budget" in q]
    services.budget_update(actor=ACTOR, budget=soft, hard_limit=True)
    with_hard = steady_pass()
    budget_queries = [q for q in with_hard if "billing_budget" in q]
    usage_queries = [q for q in with_hard if "billing_usagerecord" in q and "billing_usagerecord" not in str(without)]
    assert len(budget_queries) == 1 and len(usage_queries) == 1, with_hard  # the budgets, what closed since
    assert len(with_hard) == len(without) + 2, (len(without), len(with_hard))
    assert len(with_soft) == len(without)
    assert Job.all_tenants.filter(reason="BudgetExceeded").count() == 2  # the first one runs, the others wait


def _left(message: str) -> Decimal:
    return Decimal(re.search(r"exceeds the ([0-9.]+) USD left", message).group(1))


def test_a_job_that_ends_counts_what_it_ran_before_its_forecast_is_released(cluster, kube, tenant_a):  # noqa: F811
    make_sku("gpu", gpu_type="any", rate="1.5")
    budget = hard_budget(tenant_a, "1.20")
    first = gpu_job(tenant_a, "first", gpus=1, timeout="40m")  # forecast 1.00
    reconcile_jobs(kube)
    second = gpu_job(tenant_a, "second", gpus=1, timeout="20m")  # forecast 0.50: 0.20 left
    reconcile_jobs(kube)
    second.refresh_from_db()
    assert second.reason == "BudgetExceeded" and _left(second.message) == Decimal("0.20")
    # The first has run for 30 minutes (0.75) since the budget was last measured (at 0.00).
    began = timezone.now() - dt.timedelta(minutes=30)
    Job.all_tenants.filter(pk=first.pk).update(start_time=began)
    UsageRecord.all_tenants.filter(job_pk=first.pk).update(start=began)
    Budget.all_tenants.filter(pk=budget.pk).update(status_evaluated_at=began, status_spent=0)
    _set_job_status(cluster, "first", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    reconcile_jobs(kube)  # the first ends: its forecast goes, what it ran counts
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.phase == "Succeeded"
    assert (second.phase, second.reason) == ("Queued", "BudgetExceeded"), second.message
    assert Decimal("0.44") <= _left(second.message) <= Decimal("0.45")  # 1.20 - 0.75, and the seconds since
    reconcile_jobs(kube)  # its run is final now: counted as usage closed since the measure
    second.refresh_from_db()
    assert second.reason == "BudgetExceeded" and Decimal("0.44") <= _left(second.message) <= Decimal("0.45")
    services.budgets_evaluate()  # measured again: all of it in the spend
    reconcile_jobs(kube)
    second.refresh_from_db()
    assert second.reason == "BudgetExceeded" and Decimal("0.44") <= _left(second.message) <= Decimal("0.45")
    spent = Budget.all_tenants.get(pk=budget.pk).status_spent
    assert Decimal("0.74") <= spent <= Decimal("0.76")  # and the second never ran past the limit
