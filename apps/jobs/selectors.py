"""Reading jobs."""

from __future__ import annotations

from django.db.models import QuerySet, Sum

from apps.core.principal import Principal
from apps.core.scoping import ALL_TENANTS

from .choices import JobPhase
from .models import Job


def gpus_in_use() -> int:
    """GPUs held by jobs that are placed (Scheduling) or running, across every tenant."""
    used = Job.all_tenants.filter(phase__in=[JobPhase.SCHEDULING, JobPhase.RUNNING]).aggregate(n=Sum("gpus_allocated"))
    return int(used["n"] or 0)


def jobs_to_reconcile() -> QuerySet[Job]:
    return Job.all_tenants.filter(finalized=False).select_related("tenant").order_by("pk")


def job_visible(*, principal: Principal, object_id: str) -> bool:
    """Whether `principal` may watch the job named `object_id` (websocket subscriptions)."""
    tenants = principal.tenants_with("jobs:read")
    qs = Job.all_tenants.filter(name=object_id)
    if tenants is not ALL_TENANTS:
        qs = qs.filter(tenant_id__in=tenants)
    return qs.exists()
