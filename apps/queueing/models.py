"""Queues, cohorts, priority classes and GPU reservations.

Spec fields are desired state and change through `apps.queueing.services` only (audited); `status_*` fields of
a queue are written by the admission cycle.
"""

from __future__ import annotations

import datetime as dt

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from apps.core.models import TenantOwnedModel, TimestampedModel
from apps.tenants.models.tenant import DNS_LABEL

from .choices import PRIORITY_MAX, PRIORITY_MIN, PreemptionPolicy


class Cohort(TimestampedModel):
    """A platform-level group of queues (any tenants') that lend their idle quota to each other.

    A queue may borrow from its cohort up to its `borrowingLimit`, and lends at most its `lendingLimit`.
    """

    name = models.CharField(max_length=63, unique=True, validators=[DNS_LABEL])
    description = models.TextField(blank=True, default="")

    AUDIT_FIELDS = ("name", "description")

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Queue(TenantOwnedModel):
    """A tenant's queue: its nominal quota per resource and GPU flavor, its fair-share weight and its cohort.

    `quotas` is a list of `{"resource", "flavor", "nominal", "borrowingLimit", "lendingLimit"}` (limits null:
    unlimited), normalized by the service. A tenant with no queues has an implicit `default` queue (not a row).
    `generation` increments on every spec change; `status_*` is the admission cycle's last view of the queue.
    """

    name = models.CharField(max_length=63, validators=[DNS_LABEL])
    cohort = models.ForeignKey(Cohort, null=True, blank=True, on_delete=models.SET_NULL, related_name="queues")
    weight = models.FloatField(default=1.0, help_text="Fair-share weight, greater than 0")
    quotas = models.JSONField(default=list, blank=True)
    generation = models.PositiveBigIntegerField(default=1)

    status_admitted = models.JSONField(default=dict, blank=True, help_text="resource key -> quantity in use")
    status_pending = models.PositiveIntegerField(default=0, help_text="workloads waiting for admission")
    status_updated_at = models.DateTimeField(null=True, blank=True)

    AUDIT_FIELDS = ("name", "cohort_name", "weight", "quotas")

    class Meta(TenantOwnedModel.Meta):
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="queue_unique_name_per_tenant")]

    def __str__(self) -> str:
        return self.name

    @property
    def cohort_name(self) -> str:
        return self.cohort.name if self.cohort_id else ""


class PriorityClass(TimestampedModel):
    """A platform-level priority for workloads: higher `value` admits first and may preempt lower ones.

    At most one class is the default (`is_default`), given to workloads that name none.
    """

    name = models.CharField(max_length=63, unique=True, validators=[DNS_LABEL])
    value = models.IntegerField(validators=[MinValueValidator(PRIORITY_MIN), MaxValueValidator(PRIORITY_MAX)])
    preemption_policy = models.CharField(
        max_length=30, choices=PreemptionPolicy.choices, default=PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    )
    description = models.TextField(blank=True, default="")
    is_default = models.BooleanField(default=False)

    AUDIT_FIELDS = ("name", "value", "preemption_policy", "description", "is_default")

    class Meta:
        ordering = ("-value", "name")
        verbose_name_plural = "priority classes"
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="priorityclass_single_default"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class Reservation(TenantOwnedModel):
    """`count` GPUs of `gpu_type` held for one tenant from `start_at` to `end_at`; set by platform staff.

    While active, the reservation reconciler (apps.queueing.reservations) claims whole nodes for it (label and
    taint `gryvia.io/reserved=<tenant>`); `status_*` is that reconciler's last view: the nodes it holds, their
    GPUs, and a message saying what is short when not enough matching nodes are free.
    """

    gpu_type = models.CharField(max_length=63, help_text="GPU type label value, e.g. H100")
    count = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    start_at = models.DateTimeField(db_index=True)
    end_at = models.DateTimeField(db_index=True)
    description = models.TextField(blank=True, default="")

    status_claimed_nodes = models.JSONField(default=list, blank=True, help_text="names of the nodes claimed for it")
    status_claimed_gpus = models.PositiveIntegerField(default=0, help_text="GPUs on the claimed nodes")
    status_message = models.TextField(blank=True, default="")
    status_updated_at = models.DateTimeField(null=True, blank=True)

    AUDIT_FIELDS = ("gpu_type", "count", "start_at", "end_at", "description")

    class Meta(TenantOwnedModel.Meta):
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end_at__gt=models.F("start_at")), name="reservation_end_after_start"
            )
        ]

    def __str__(self) -> str:
        return f"{self.count}x {self.gpu_type} {self.start_at:%Y-%m-%d %H:%M}..{self.end_at:%Y-%m-%d %H:%M}"

    def is_active(self, now: dt.datetime | None = None) -> bool:
        """Whether the reservation holds its GPUs at `now` (default: the current time); the end is exclusive."""
        now = now or timezone.now()
        return self.start_at <= now < self.end_at


class GpuNode(TimestampedModel):
    """A platform-level inventory row for one cluster Node with GPUs, refreshed from the Node list each pass.

    Written only by `apps.queueing.inventory.sync_gpu_nodes` (never edited by hand). The GPU fields come from
    NVIDIA GPU feature discovery labels (`nvidia.com/gpu.product`, `nvidia.com/gpu.count`, ...); `gpu_type` is
    the `gryvia.io/gpu` label when set, else the short type derived from the product ("NVIDIA-H100-80GB-HBM3" ->
    "H100"). `rack`/`ib_block` are topology labels used by placement. `allocatable_gpus` is the Node's allocatable
    `nvidia.com/gpu`; `allocated_gpus` is what Gryvia's pods hold on it. `healthy` is false when the node carries
    the `gryvia.io/gpu-unhealthy` taint or is not Ready; `simulated` marks the local backend's declared GPUs.
    """

    name = models.CharField(max_length=253, unique=True)
    gpu_product = models.CharField(max_length=127, blank=True, default="")
    gpu_type = models.CharField(max_length=63, blank=True, default="", db_index=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(default=0, help_text="Memory per GPU, MiB")
    driver_version = models.CharField(max_length=63, blank=True, default="")
    cuda_version = models.CharField(max_length=63, blank=True, default="")
    mig_capable = models.BooleanField(default=False)
    mig_strategy = models.CharField(max_length=31, blank=True, default="")
    rdma = models.BooleanField(default=False)
    sriov = models.BooleanField(default=False)
    rack = models.CharField(max_length=63, blank=True, default="")
    ib_block = models.CharField(max_length=63, blank=True, default="")
    allocatable_gpus = models.PositiveIntegerField(default=0)
    allocated_gpus = models.PositiveIntegerField(default=0)
    healthy = models.BooleanField(default=True)
    unschedulable = models.BooleanField(default=False)
    simulated = models.BooleanField(default=False)
    labels = models.JSONField(default=dict, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("name",)
        verbose_name = "GPU node"

    def __str__(self) -> str:
        return f"{self.name} ({self.gpu_count}x {self.gpu_type or '?'})"

    @property
    def free_gpus(self) -> int:
        return max(self.allocatable_gpus - self.allocated_gpus, 0)
