"""The jobs app's writes (its public face with selectors): submit, cancel, resize, resubmit, release, delete and
checkpoint reports (`jobs`), and lifecycle events (`events`). Every change is transactional and audited; the job
reconciler turns the result into cluster objects and writes status.
"""

from .documents import job_document_load, job_document_parse
from .events import PHASE_EVENT_TYPES, RECONCILER, job_event, job_events_record
from .jobs import (
    RECONCILE,
    RESERVED_NAMES,
    JobConflict,
    job_budget_release,
    job_cancel,
    job_create,
    job_delete,
    job_estimate,
    job_report_checkpoint,
    job_resize,
    job_resubmit,
    job_validate,
    validate_name,
)

__all__ = [
    "PHASE_EVENT_TYPES",
    "RECONCILE",
    "RECONCILER",
    "RESERVED_NAMES",
    "JobConflict",
    "job_budget_release",
    "job_cancel",
    "job_create",
    "job_delete",
    "job_document_load",
    "job_document_parse",
    "job_estimate",
    "job_event",
    "job_events_record",
    "job_report_checkpoint",
    "job_resize",
    "job_resubmit",
    "job_validate",
    "validate_name",
]
