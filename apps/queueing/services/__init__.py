"""Queues, cohorts, priority classes and reservations: every change goes through these functions.

Each write is transactional and leaves one audit row. Cohorts and priority classes are platform-level (audited
with no tenant); reservations are a tenant's but only platform staff set them. Errors are Django
`ValidationError`s naming the field, or `PermissionError` (HTTP 403).
"""

from .priorities import (
    PRIORITY_CLASS_FIELDS,
    priority_class_create,
    priority_class_delete,
    priority_class_update,
)
from .queues import (
    COHORT_FIELDS,
    QUEUE_FIELDS,
    cohort_create,
    cohort_delete,
    cohort_update,
    queue_create,
    queue_delete,
    queue_update,
)
from .quotas import MAX_QUOTAS, MAX_WEIGHT, check_tenant_ceilings, validate_quotas
from .reservation_services import (
    RECONCILE_RESERVATIONS,
    RESERVATION_FIELDS,
    reservation_create,
    reservation_delete,
    reservation_update,
)
from .status import queue_status_sync

__all__ = [
    "COHORT_FIELDS",
    "MAX_QUOTAS",
    "MAX_WEIGHT",
    "PRIORITY_CLASS_FIELDS",
    "QUEUE_FIELDS",
    "RECONCILE_RESERVATIONS",
    "RESERVATION_FIELDS",
    "check_tenant_ceilings",
    "cohort_create",
    "cohort_delete",
    "cohort_update",
    "priority_class_create",
    "priority_class_delete",
    "priority_class_update",
    "queue_create",
    "queue_delete",
    "queue_status_sync",
    "queue_update",
    "reservation_create",
    "reservation_delete",
    "reservation_update",
    "validate_quotas",
]
