"""A job outlives nothing, and nothing outlives a job (issue 26, item 1), in one process on the local backend.

The database is the truth: a workload the backend no longer has (its process restarted, or someone deleted it) is
run again from its last checkpoint within `retryLimit`, else the job fails with `WorkloadLost`; a timeout is
enforced from the start time the database keeps; a job's usage record closes when its run ends. The same across
real server and worker restarts: tests/jobs/test_restarts.py.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from apps.billing.models import UsageRecord
from apps.cluster.backends import set_backend
from apps.cluster.backends.base import JOB, ObjectRef
from apps.cluster.backends.local import LocalBackend
from apps.cluster.backends.local.pods import group_alive
from apps.jobs.models import Job
from apps.jobs.reconciler import reconcile_jobs
from apps.tenants.reconciler import reconcile_tenants
from tests.jobs.factories import make_job
from tests.jobs.test_local_e2e import drive, pids

SLEEP = ["python3", "-c", "import time; time.sleep(120)"]


def restart_backend(tmp_path) -> LocalBackend:
    """What a restart of the process running the local backend leaves: its processes gone, an empty store."""
    backend = LocalBackend(data_dir=tmp_path)
    set_backend(backend)  # closes the old one: its pods stop
    reconcile_tenants(backend)
    return backend


def open_usage(job: Job) -> list[UsageRecord]:
    return list(UsageRecord.all_tenants.filter(job_pk=job.pk, final=False))


def reasons(job: Job) -> list[str]:
    return list(job.events.order_by("id").values_list("reason", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_lost_workload_runs_again_within_retry_limit_then_fails_with_workload_lost(local, tenant_a, tmp_path):
    job = make_job(tenant_a, "survivor", retryLimit=1, distributed={"enabled": False}, command=SLEEP)
    job = drive(job, lambda j: j.phase == "Running" and pids(j))
    first = pids(job)
    assert len(open_usage(job)) == 1

    restart_backend(tmp_path)
    assert not [pid for pid in first if group_alive(pid)]
    job = drive(job, lambda j: j.attempts == 2 and j.phase == "Running" and pids(j))
    assert "WorkloadLost" in reasons(job)
    second = pids(job)
    assert second and set(second).isdisjoint(first) and all(group_alive(pid) for pid in second)
    runs = UsageRecord.all_tenants.filter(job_pk=job.pk).order_by("id")
    assert [r.final for r in runs] == [True, False]  # the lost run closed when its loss was seen; a new one is open
    assert job.start_time is not None and job.start_time <= runs[0].start + dt.timedelta(seconds=5)

    restart_backend(tmp_path)  # the second loss: its one retry is used
    job = drive(job, lambda j: j.is_terminal)
    assert (job.phase, job.reason) == ("Failed", "WorkloadLost"), job.message
    assert "retryLimit 1" in job.message
    assert not open_usage(job)
    assert not [pid for pid in second if group_alive(pid)]


@pytest.mark.django_db(transaction=True)
def test_a_workload_deleted_behind_gryvias_back_fails_the_job_when_no_retry_is_left(local, tenant_a):
    job = make_job(tenant_a, "deleted", distributed={"enabled": False}, command=SLEEP)
    job = drive(job, lambda j: j.phase == "Running" and pids(j))
    started = pids(job)
    [workload] = local.list(JOB, namespace=tenant_a.namespace)
    local.delete(ObjectRef.of(workload))
    job = drive(job, lambda j: j.is_terminal)
    assert (job.phase, job.reason) == ("Failed", "WorkloadLost")
    assert not open_usage(job)
    time.sleep(0.5)
    assert not [pid for pid in started if group_alive(pid)]


@pytest.mark.django_db(transaction=True)
def test_the_timeout_is_enforced_from_the_databases_start_time(local, tenant_a):
    """A job whose workload was re-created keeps its first start: its deadline is the database's, not the
    backend's (whose activeDeadlineSeconds counts from the new workload's start)."""
    job = make_job(tenant_a, "overdue", timeout="60s", distributed={"enabled": False}, command=SLEEP)
    job = drive(job, lambda j: j.phase == "Running" and pids(j))
    started = pids(job)
    Job.all_tenants.filter(pk=job.pk).update(start_time=timezone.now() - dt.timedelta(seconds=61))
    reconcile_jobs()  # one pass: failed and its workload deleted
    job.refresh_from_db()
    assert (job.phase, job.reason) == ("Failed", "DeadlineExceeded"), job.message
    assert "timeout of 60s" in job.message
    assert not open_usage(job)
    deadline = time.monotonic() + 15
    while [pid for pid in started if group_alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in started if group_alive(pid)]
    assert not local.list(JOB, namespace=tenant_a.namespace)
