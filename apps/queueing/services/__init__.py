"""Queues, cohorts, priority classes and reservations: every change goes through these functions.

Each write is transactional and leaves one audit row. Cohorts and priority classes are platform-level (audited
with no tenant); reservations are a tenant's but only platform staff set them. Errors are Django
`ValidationError`s naming the field, or `PermissionError` (HTTP 403).

Also what the job reconciler needs to run a job under the admission mode (GRYVIA_ADMISSION): the GPU inventory it
syncs from the Nodes, Kueue's suspend patch and KAI's queue and pod template patch.
"""

from ..inventory import sync_gpu_nodes
from ..kai import gpu_fraction_annotations, pod_template_patch
from ..kai import queue_name as kai_queue_name
from ..kueue import suspend_patch
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
    "gpu_fraction_annotations",
    "kai_queue_name",
    "pod_template_patch",
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
    "suspend_patch",
    "sync_gpu_nodes",
    "validate_quotas",
]
