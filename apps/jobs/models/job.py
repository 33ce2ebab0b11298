from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils.functional import cached_property

from apps.core.models import TenantOwnedModel

from ..choices import TERMINAL_PHASES, WAITING_PHASES, JobPhase
from ..spec import JobSpec


class Job(TenantOwnedModel):
    """A GryviaAIJob: training, fine-tuning, evaluation or inference work, run as an Indexed Job or StatefulSet.

    `spec` is the normalized upstream spec (camelCase). Status fields are written by the job reconciler only,
    with a compare-and-swap on `generation` (bumped by resize, the one spec change allowed after submission).
    """

    name = models.CharField(max_length=52)
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    spec = models.JSONField()
    generation = models.PositiveBigIntegerField(default=1)
    observed_generation = models.PositiveBigIntegerField(default=0)
    submitted_by = models.CharField(max_length=200, blank=True, default="")

    phase = models.CharField(max_length=20, choices=JobPhase.choices, default=JobPhase.PENDING, db_index=True)
    reason = models.CharField(max_length=100, blank=True, default="")
    message = models.TextField(blank=True, default="")
    conditions = models.JSONField(default=list, blank=True)
    start_time = models.DateTimeField(null=True, blank=True)
    completion_time = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    requeues_attempts = models.PositiveIntegerField(default=0, help_text="attempts used before its last requeue")
    restarts = models.JSONField(default=dict, blank=True, help_text="node index -> restarts")
    allocated_nodes = models.JSONField(default=list, blank=True)
    placement = models.JSONField(default=dict, blank=True, help_text="chosen nodes, their scores and why")
    current_nodes = models.PositiveIntegerField(default=0)
    ready_nodes = models.PositiveIntegerField(default=0)
    gpus_allocated = models.PositiveIntegerField(default=0)
    admitted_borrowing = models.BooleanField(default=False, help_text="admitted on quota borrowed from its cohort")
    gpus_simulated = models.BooleanField(default=False, help_text="its GPUs are declared by GRYVIA_LOCAL_GPUS")
    endpoint = models.CharField(max_length=300, blank=True, default="")
    last_checkpoint_step = models.BigIntegerField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    last_reported_step = models.BigIntegerField(null=True, blank=True)
    node_loss_recoveries = models.PositiveIntegerField(default=0)
    lost_steps = models.BigIntegerField(default=0)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    finalized = models.BooleanField(default=False, help_text="terminal, and its cluster objects are collected")
    status_applied = models.JSONField(default=dict, blank=True, help_text="object key -> spec hash last applied")
    # What admission orders and counts, fixed at submission (and resize) so a cycle reads it without the spec.
    queue_name = models.CharField(max_length=63, default="default", help_text="spec.queueName, or default")
    priority = models.IntegerField(default=0, help_text="its priority class's value at submission, or spec.priority")
    may_preempt = models.BooleanField(default=True, help_text="its priority class's preemptionPolicy is not Never")
    request = models.JSONField(default=dict, blank=True, help_text="the whole gang's resources, as admission keys")
    timeout_s = models.PositiveIntegerField(null=True, blank=True, help_text="spec.timeout in seconds (its forecast)")
    # A platform admin let it past hard budgets (apps.jobs.services.job_budget_release): admission ignores them.
    budget_released_at = models.DateTimeField(null=True, blank=True)

    AUDIT_FIELDS = ("name", "spec", "generation", "phase", "reason", "cancel_requested_at")

    class Meta(TenantOwnedModel.Meta):
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="job_unique_name_per_tenant")]
        indexes = [
            models.Index(fields=["finalized", "phase"], name="job_active_idx"),
            # A queue's waiting jobs in admission order: the heads each cycle reads, the position a reader sees.
            models.Index(
                fields=["tenant", "queue_name", "-priority", "created_at", "id"],
                name="job_queue_order_idx",
                condition=models.Q(phase__in=WAITING_PHASES),
            ),
            # The few jobs past admission and not yet finalized, among thousands waiting or done: what every
            # reconcile pass reads (apps.jobs.admission.inputs.active) without scanning the table.
            models.Index(
                fields=["id"],
                name="job_admitted_idx",
                condition=models.Q(finalized=False) & ~models.Q(phase__in=WAITING_PHASES),
            ),
            # Waiting jobs being cancelled: each pass reads them (apps.jobs.selectors.jobs_to_reconcile).
            models.Index(
                fields=["id"],
                name="job_cancelled_waiting_idx",
                condition=models.Q(finalized=False, cancel_requested_at__isnull=False, phase__in=WAITING_PHASES),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @cached_property
    def uid_text(self) -> str:
        """`str(self.uid)`, made once per instance (a reconcile pass names each job it handles by it a dozen times)."""
        return str(self.uid)

    @property
    def typed_spec(self) -> JobSpec:
        return JobSpec.of(self.spec)

    @property
    def is_terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def is_waiting(self) -> bool:
        """Waiting for admission in its queue (what has a queue position)."""
        return self.phase in WAITING_PHASES and self.cancel_requested_at is None and not self.finalized

    # The position in its queue is read, never stored (it moves whenever a job ahead starts or leaves): lists
    # annotate it (with_queue_positions, below); a single job reads it with one query.
    @property
    def queue_position(self) -> int | None:
        if not self.is_waiting:
            return None
        if "queue_ahead_read" not in self.__dict__:
            self._read_queue_position()
        return self.__dict__["queue_ahead_read"] + 1

    @property
    def queue_length(self) -> int | None:
        if not self.is_waiting:
            return None
        if "queue_length_read" not in self.__dict__:
            self._read_queue_position()
        return self.__dict__["queue_length_read"]

    def refresh_from_db(self, *args, **kwargs) -> None:
        self.__dict__.pop("queue_ahead_read", None)
        self.__dict__.pop("queue_length_read", None)
        super().refresh_from_db(*args, **kwargs)

    def _read_queue_position(self) -> None:
        position, length = queue_position(self)
        self.__dict__["queue_ahead_read"] = (position or 1) - 1
        self.__dict__["queue_length_read"] = length


class JobEvent(models.Model):
    """One lifecycle event of a job (the job's event list; also in the audit log and the live channels)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=10, default="Normal")  # Normal | Warning
    reason = models.CharField(max_length=100)
    message = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ("created_at", "id")

    def __str__(self) -> str:
        return f"{self.job_id} {self.reason}"


# --- queue positions, read (never stored: they move whenever a job ahead starts or leaves); apps.jobs.selectors
# hands them out -----------------------------------------------------------------------------------------------------

_WAITING = Q(finalized=False, phase__in=WAITING_PHASES, cancel_requested_at__isnull=True)


def _same_queue() -> QuerySet[Job]:
    return Job.all_tenants.filter(_WAITING, tenant_id=OuterRef("tenant_id"), queue_name=OuterRef("queue_name"))


def _count(qs: QuerySet[Job]) -> Subquery:
    return Coalesce(
        Subquery(qs.order_by().values("tenant_id").annotate(n=Count("id")).values("n")[:1]),
        Value(0),
        output_field=IntegerField(),
    )


def with_queue_positions(qs: QuerySet[Job]) -> QuerySet[Job]:
    """Annotate each job with its position in its queue and the queue's length (both counts are read from the
    queue-order index; a job that is not waiting gets them but they are not shown)."""
    ahead = _same_queue().filter(
        Q(priority__gt=OuterRef("priority"))
        | Q(priority=OuterRef("priority"), created_at__lt=OuterRef("created_at"))
        | Q(priority=OuterRef("priority"), created_at=OuterRef("created_at"), pk__lt=OuterRef("pk"))
    )
    return qs.annotate(queue_ahead_read=_count(ahead), queue_length_read=_count(_same_queue()))


def queue_position(job: Job) -> tuple[int | None, int | None]:
    """(position from 1, queue length) of a waiting job; (None, None) for any other."""
    if not job.is_waiting:
        return None, None
    row = with_queue_positions(Job.all_tenants.filter(pk=job.pk)).values_list("queue_ahead_read", "queue_length_read")
    found = row.first()
    if found is None:
        return None, None
    return found[0] + 1, found[1]
