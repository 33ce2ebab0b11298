"""Job events: a job's lifecycle events, each with its audit row, the live channels' broadcast and, for phase
changes, an `job.*` event for webhook subscribers (apps.core.events), all in the caller's transaction."""

from __future__ import annotations

from typing import Any

from apps.billing import services as billing
from apps.core import events as core_events
from apps.core.audit import audit_record, audit_record_many
from apps.core.db.bulk import bulk_insert
from apps.core.principal import Principal, system
from apps.core.scoping import tenant_scope

from .. import choices as C
from ..models import Job, JobEvent

RECONCILER = system("job-reconciler")
# Lifecycle event reasons that are phase changes outside receivers (webhooks) subscribe to.
PHASE_EVENT_TYPES = {
    "Queued": "job.queued",
    "Requeued": "job.queued",
    "Running": "job.running",
    "Succeeded": "job.succeeded",
    "Failed": "job.failed",
    "Cancelled": "job.cancelled",
    "Preempted": "job.preempted",
    "Rejected": "job.rejected",
}
_PAYLOAD_FIELDS = {"uid", "spec", "queue_name"}


def _audit_fields(actor: Principal, action: str, job: Job, before: Any, after: Any) -> dict[str, Any]:
    return dict(
        actor=actor,
        action=action,
        obj=job,
        object_type="job",
        object_id=job.name,
        tenant_id=job.tenant_id,
        tenant_slug=job.tenant.slug,
        before=before,
        after=after,
    )


def job_audit(actor: Principal, action: str, job: Job, before: Any, after: Any) -> None:
    """One audit row for a change of the job, in the caller's transaction."""
    audit_record(**_audit_fields(actor, action, job, before, after))


def job_event(*, job: Job, reason: str, message: str, type: str = "Normal", actor: Principal = RECONCILER) -> None:
    """Record a lifecycle event: the job's event list, the audit log and the live channels (after commit)."""
    job_events_record([(job, reason, message, type)], actor=actor)


def job_events_record(
    events: list[tuple[Job, str, str, str]], *, actor: Principal = RECONCILER, runs: bool = True
) -> None:
    """`job_event` for many (job, reason, message, type): one INSERT of events, one of audit rows. `runs=False`:
    these jobs never ran (submitted jobs being queued), so no usage record can open or close."""
    if not events:
        return
    bulk_insert(
        JobEvent,
        [
            {"job_id": job.pk, "type": kind, "reason": reason, "message": message[:2000]}
            for job, reason, message, kind in events
        ],
    )
    audit_record_many(
        [
            _audit_fields(
                actor, f"job.{reason[0].lower()}{reason[1:]}", job, None, {"reason": reason, "message": message[:500]}
            )
            for job, reason, message, _kind in events
        ]
    )
    _emit_phase_events(events)
    if runs:
        billing.usage_job_events(events)  # usage records open at admission and close when the run ends


def _emit_phase_events(events: list[tuple[Job, str, str, str]]) -> None:
    """Phase changes among `events` as `job.*` events (apps.core.events), in the caller's transaction. Costs one
    query when nobody listens; payloads are built only for the tenants and types someone subscribes to."""
    typed = [(job, PHASE_EVENT_TYPES[r], r, m) for job, r, m, _k in events if r in PHASE_EVENT_TYPES]
    if not typed:
        return
    wanted = core_events.listening(tenant_ids={e[0].tenant_id for e in typed}, types={e[1] for e in typed})
    typed = [e for e in typed if (e[0].tenant_id, e[1]) in wanted]
    if not typed:
        return
    # Jobs read with only a few columns (the reconciler's bulk queueing) get the rest in one query.
    partial = [job.pk for job, *_ in typed if job.get_deferred_fields() & _PAYLOAD_FIELDS]
    with tenant_scope({job.tenant_id for job, *_ in typed}):
        found = Job.objects.filter(pk__any_of=partial).values("pk", "uid", "queue_name", "spec__type")
    rows = {row["pk"]: row for row in found}
    items = []
    for job, event_type, reason, message in typed:
        row = rows.get(job.pk) or {"uid": job.uid, "queue_name": job.queue_name, "spec__type": job.spec.get("type")}
        payload = {
            "name": job.name,
            "uid": str(row["uid"]),
            "type": row["spec__type"],
            "queue": row["queue_name"],
            "phase": event_type.removeprefix("job.").capitalize(),
            "reason": reason,
            "message": message[:1000],
        }
        labels = {C.TYPE_LABEL: payload["type"] or "", "gryvia.io/queue": payload["queue"]}
        items.append(
            {
                "tenant_id": job.tenant_id,
                "tenant_slug": job.tenant.slug,
                "type": event_type,
                "data": {"job": payload},
                "subject": f"job/{job.name}",
                "match": {"name": job.name, "labels": labels},
            }
        )
    core_events.emit_many(items)
