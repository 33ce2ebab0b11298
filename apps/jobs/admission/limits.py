"""Feeds the admission function the limits it admits within: every queue's quota and each tenant's ceilings.

Both are small tables read again inside a pass only when they changed (apps.core.db.epochs), as plain rows: a
cycle builds no Queue, Cohort or Tenant models.
"""

from __future__ import annotations

import math

from apps.core.db.epochs import EpochCached
from apps.core.db.prepared import PreparedRead
from apps.core.quantities import cpu_millicores, memory_bytes
from apps.queueing import selectors as queueing
from apps.tenants.models import Tenant

from .usage import GPU, QueueQuota


def _limits(vector: dict[str, float]) -> dict[str, int | None]:
    return {k: (None if math.isinf(v) else int(v)) for k, v in vector.items()}


_QUEUES = PreparedRead(
    lambda: queueing.all_queues().values_list("tenant_id", "name", "cohort__name", "weight", "quotas")
)
_CEILINGS = PreparedRead(
    lambda: Tenant.objects.filter(archived_at__isnull=True).values_list(
        "pk", "max_gpus", "gpu_type_ceilings", "max_cpu", "max_memory"
    )
)


def queue_quotas() -> list[QueueQuota]:
    """Every queue's limits (read again inside a pass only when a queue or cohort changed: apps.core.db.epochs)."""
    return _QUEUE_QUOTAS.get()


def tenant_ceilings() -> dict[int, dict[str, int]]:
    """Each tenant's ceilings, by resource key (read again inside a pass only when a tenant changed)."""
    return _TENANT_CEILINGS.get()


def _queue_quotas() -> list[QueueQuota]:
    out = []
    # Plain rows: a cycle builds no Queue or Cohort models.
    for tenant_id, name, cohort, weight, quotas in _QUEUES.rows():
        vector = queueing.quota_vector(quotas)
        out.append(
            QueueQuota(
                tenant_id=tenant_id,
                name=name,
                cohort=cohort,
                weight=float(weight),
                nominal={k: int(v) for k, v in vector.nominal.items()},
                borrowing_limit=_limits(vector.borrowing_limit),
                lending_limit=_limits(vector.lending_limit),
            )
        )
    return out


def _tenant_ceilings() -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for pk, max_gpus, gpu_type_ceilings, max_cpu, max_memory in _CEILINGS.rows():
        ceiling: dict[str, int] = {}
        if max_gpus is not None:
            ceiling[GPU] = max_gpus
        for gpu_type, count in (gpu_type_ceilings or {}).items():
            ceiling[f"{GPU}:{gpu_type}"] = int(count)
        if max_cpu:
            ceiling["cpu"] = cpu_millicores(max_cpu)
        if max_memory:
            ceiling["memory"] = memory_bytes(max_memory)
        if ceiling:
            out[pk] = ceiling
    return out


_QUEUE_QUOTAS = EpochCached(("queueing_queue", "queueing_cohort"), _queue_quotas)
_TENANT_CEILINGS = EpochCached(("tenants_tenant",), _tenant_ceilings)
