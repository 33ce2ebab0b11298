"""apps.jobs.services: what a write leaves behind when part of it fails."""

from __future__ import annotations

import pytest
from django.db import DatabaseError

from apps.core.models import AuditEntry
from apps.jobs import services
from apps.jobs.models import Job, JobEvent
from tests.factories import ACTOR
from tests.jobs.factories import spec

pytestmark = pytest.mark.django_db


def _left_behind(tenant, name: str) -> tuple[int, int, int]:
    """(jobs, job.create audit rows, Submitted events) named `name` in the tenant."""
    return (
        Job.all_tenants.filter(tenant=tenant, name=name).count(),
        AuditEntry.all_tenants.filter(tenant_id=tenant.pk, object_id=name, action="job.create").count(),
        JobEvent.objects.filter(job__tenant=tenant, job__name=name, reason="Submitted").count(),
    )


def test_job_create_writes_the_job_its_audit_row_and_its_event_or_none_of_them(tenant_a, monkeypatch):
    services.job_create(actor=ACTOR, tenant=tenant_a, name="kept", spec=spec())
    assert _left_behind(tenant_a, "kept") == (1, 1, 1)

    def refuse(**kwargs):
        raise DatabaseError("the events table cannot be written")

    monkeypatch.setattr(JobEvent.objects, "create", refuse)
    with pytest.raises(DatabaseError):
        services.job_create(actor=ACTOR, tenant=tenant_a, name="lost", spec=spec())
    assert _left_behind(tenant_a, "lost") == (0, 0, 0)
    monkeypatch.undo()
    # The failed submission left the name free.
    services.job_create(actor=ACTOR, tenant=tenant_a, name="lost", spec=spec())
    assert _left_behind(tenant_a, "lost") == (1, 1, 1)
