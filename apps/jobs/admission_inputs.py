"""Feeds the admission function from the database: waiting jobs, what admitted jobs hold, queues, ceilings."""

from __future__ import annotations

import math
from collections.abc import Iterable

from apps.queueing import selectors as queueing
from apps.queueing.quantities import QuantityError, cpu_millicores, memory_bytes
from apps.tenants.models import Tenant

from .admission import GPU, Demand, Holding, QueueQuota
from .choices import JobPhase
from .models import Job

WAITING_PHASES = (JobPhase.PENDING, JobPhase.QUEUED)
HOLDING_PHASES = (JobPhase.SCHEDULING, JobPhase.RUNNING, JobPhase.PREEMPTED)


def job_request(job: Job) -> dict[str, int]:
    """The whole gang's resources, as admission keys."""
    spec = job.typed_spec
    nodes = spec.desired_nodes
    out: dict[str, int] = {}
    gpus = spec.total_gpus
    if gpus:
        out[GPU] = gpus
        gpu_type = spec.raw.get("gpuType")
        if gpu_type and gpu_type != "any":
            out[f"{GPU}:{gpu_type}"] = gpus
    resources = spec.raw.get("resources") or {}
    try:
        if resources.get("cpu"):
            out["cpu"] = cpu_millicores(resources["cpu"]) * nodes
        if resources.get("memory"):
            out["memory"] = memory_bytes(resources["memory"]) * nodes
    except QuantityError:
        pass  # validated at submission; an unreadable value asks for nothing rather than blocking admission
    return out


def queue_name(job: Job) -> str:
    return job.spec.get("queueName") or "default"


class Priorities:
    """A job's priority: its priority class's value (or the default class's), else `spec.priority`."""

    def __init__(self) -> None:
        self.classes = {pc.name: pc for pc in queueing.all_priority_classes()}
        self.default = next((pc for pc in self.classes.values() if pc.is_default), None)

    def of(self, job: Job) -> tuple[int, bool]:
        """(priority, may preempt)."""
        named = self.classes.get(job.spec.get("priorityClassName") or "")
        if named is None and not job.spec.get("priority"):
            named = self.default
        if named is not None:
            return named.value, named.preemption_policy != "Never"
        return int(job.spec.get("priority") or 0), True


def demands(jobs: Iterable[Job], priorities: Priorities) -> list[Demand]:
    out = []
    for job in jobs:
        priority, can_preempt = priorities.of(job)
        out.append(
            Demand(
                job_id=job.pk,
                tenant_id=job.tenant_id,
                queue=queue_name(job),
                priority=priority,
                submitted_at=job.created_at,
                request=job_request(job),
                can_preempt=can_preempt,
            )
        )
    return out


def holdings(jobs: Iterable[Job], priorities: Priorities) -> list[Holding]:
    return [
        Holding(
            job.pk,
            job.tenant_id,
            queue_name(job),
            job_request(job),
            job.admitted_borrowing,
            priority=priorities.of(job)[0],
            admitted_at=job.start_time or job.updated_at,
            evicting=job.phase == JobPhase.PREEMPTED,
        )
        for job in jobs
    ]


def _limits(vector: dict[str, float]) -> dict[str, int | None]:
    return {k: (None if math.isinf(v) else int(v)) for k, v in vector.items()}


def queue_quotas() -> list[QueueQuota]:
    out = []
    for queue in queueing.all_queues():
        vector = queueing.queue_quota_vector(queue)
        out.append(
            QueueQuota(
                tenant_id=queue.tenant_id,
                name=queue.name,
                cohort=queue.cohort.name if queue.cohort_id else None,
                weight=float(queue.weight),
                nominal={k: int(v) for k, v in vector.nominal.items()},
                borrowing_limit=_limits(vector.borrowing_limit),
                lending_limit=_limits(vector.lending_limit),
            )
        )
    return out


def tenant_ceilings() -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for tenant in Tenant.objects.filter(archived_at__isnull=True):
        ceiling: dict[str, int] = {}
        if tenant.max_gpus is not None:
            ceiling[GPU] = tenant.max_gpus
        for gpu_type, count in (tenant.gpu_type_ceilings or {}).items():
            ceiling[f"{GPU}:{gpu_type}"] = int(count)
        if tenant.max_cpu:
            ceiling["cpu"] = cpu_millicores(tenant.max_cpu)
        if tenant.max_memory:
            ceiling["memory"] = memory_bytes(tenant.max_memory)
        if ceiling:
            out[tenant.pk] = ceiling
    return out


def waiting_jobs() -> list[Job]:
    """Jobs that wait for admission: submitted, not cancelled, not yet placed."""
    return list(
        Job.all_tenants.filter(finalized=False, phase__in=WAITING_PHASES, cancel_requested_at__isnull=True).order_by(
            "pk"
        )
    )


def holding_jobs() -> list[Job]:
    return list(Job.all_tenants.filter(finalized=False, phase__in=HOLDING_PHASES))
