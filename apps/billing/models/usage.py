"""The GPU SKU catalog and usage records.

Money and quantities are Decimals with 6 fractional digits (the ledger's precision). A usage record is open while
its run lasts and final afterwards; a final record and every ledger entry are immutable, in code (`save`/`delete`
guards) and in the database (triggers, apps.billing.models.triggers).
"""

from __future__ import annotations

import uuid

from django.core.cache import cache
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models, transaction

from apps.core.models import TimestampedModel
from apps.core.scoping import TenantScopedManager

from ..choices import UsageKind

GPU_TYPE = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "letters, digits, '.', '_' and '-', starting alphanumeric")
SKU_NAME = RegexValidator(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$", "lowercase letters, digits, '.' and '-'")
CURRENCY = RegexValidator(r"^[A-Z]{3}$", "an ISO 4217 code such as USD")
CPU_GPU_TYPE = "cpu"  # the catalog entry that prices jobs without GPUs (their cores and memory)
# The catalog as the admission cycle reads it (apps.billing.selectors.pricing.Catalog.cached): forgotten whenever a
# SKU is written.
CATALOG_CACHE_KEY = "gryvia:billing:catalog:v1"


def _money(**kw) -> models.DecimalField:
    return models.DecimalField(max_digits=20, decimal_places=6, validators=[MinValueValidator(0)], **kw)


class ImmutableError(Exception):
    """A final usage record or a ledger entry was about to be changed or deleted."""


class GpuSku(TimestampedModel):
    """A price in the catalog: per GPU-hour of one GPU type, in force from `effective_from` until `effective_to`.

    Platform-level (no tenant). Windows of the same GPU type (case-insensitive) never overlap, so one instant has at
    most one price per type. `cpu_core_hour_rate` and `memory_gib_hour_rate` price a job's requested cores and
    memory on top of its GPUs; the SKU of GPU type `cpu` prices jobs without GPUs.
    """

    name = models.CharField(max_length=63, unique=True, validators=[SKU_NAME])
    gpu_type = models.CharField(max_length=63, validators=[GPU_TYPE], db_index=True)
    hourly_rate = _money(help_text="per GPU-hour")
    cpu_core_hour_rate = _money(default=0, help_text="per requested CPU core-hour")
    memory_gib_hour_rate = _money(default=0, help_text="per requested memory GiB-hour")
    currency = models.CharField(max_length=3, default="USD", validators=[CURRENCY])
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True, help_text="exclusive; empty: open-ended")
    description = models.CharField(max_length=500, blank=True, default="")

    AUDIT_FIELDS = (
        "name",
        "gpu_type",
        "hourly_rate",
        "cpu_core_hour_rate",
        "memory_gib_hour_rate",
        "currency",
        "effective_from",
        "effective_to",
        "description",
    )

    class Meta:
        ordering = ("gpu_type", "effective_from", "name")
        verbose_name = "GPU SKU"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(effective_to__isnull=True) | models.Q(effective_to__gt=models.F("effective_from")),
                name="gpusku_window_not_empty",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.gpu_type} {self.hourly_rate} {self.currency}/GPU-hour)"

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        forget_catalog()

    def delete(self, *args, **kwargs):
        out = super().delete(*args, **kwargs)
        forget_catalog()
        return out


def forget_catalog() -> None:
    """Drop the cached catalog now and again once the writer's transaction commits (GpuSku.save/delete)."""
    cache.delete(CATALOG_CACHE_KEY)
    transaction.on_commit(lambda: cache.delete(CATALOG_CACHE_KEY))


class UsageRecord(models.Model):
    """Priced usage: one admitted run of a job, one hour of a model's tokens, one external event, or a stretch of
    time a reservation held GPUs.

    A job's run opens at admission and is refreshed while it runs (`end` empty, `refreshed_at` moving); it is final
    when the run ends (finished, preempted, evicted or the job deleted). A reservation's record works the same way
    (apps.billing.services.reservations). Final records never change and go into the ledger. `event_id` makes every
    other kind idempotent: the same id in the same tenant is stored once. `reserved_gpus` of a job run are GPUs on
    nodes its tenant's reservation holds: the reservation's record bills them, the run does not.
    """

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Indexed by the unique (tenant, event_id) and the (tenant, start) index below.
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False)
    name = models.CharField(max_length=200, help_text="usage-<job uid>[-<run>], tokens-…, event-…")
    kind = models.CharField(max_length=20, choices=UsageKind.choices)
    event_id = models.CharField(max_length=200, null=True, blank=True)
    # Looked up only among open records, through the partial unique index below.
    job_pk = models.BigIntegerField(null=True, blank=True, help_text="the job's id while it exists")
    job_uid = models.UUIDField(null=True, blank=True)
    job_name = models.CharField(max_length=200, blank=True, default="")
    run = models.PositiveIntegerField(default=1, help_text="1 for the first admitted run, then one per re-admission")
    # Looked up only among open records, through the partial unique index below.
    reservation_pk = models.BigIntegerField(null=True, blank=True, help_text="the reservation's id (kind reservation)")
    queue_name = models.CharField(max_length=63, blank=True, default="")
    model = models.CharField(max_length=100, blank=True, default="")
    # PROTECT is enforced by the ORM; no database constraint, whose per-row check at commit would cost ingestion
    # more than everything else (SKUs are only deleted through apps.billing.services, which checks for usage).
    sku = models.ForeignKey(
        GpuSku, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_constraint=False
    )
    sku_name = models.CharField(max_length=63, blank=True, default="", help_text="empty: nothing in the catalog")
    gpu_type = models.CharField(max_length=63, blank=True, default="")
    gpus = models.PositiveIntegerField(default=0)
    reserved_gpus = models.PositiveIntegerField(
        default=0, help_text="of `gpus`: those on nodes the tenant's reservation holds (billed by the reservation)"
    )
    cpu_cores = models.DecimalField(max_digits=14, decimal_places=3, default=0)
    memory_gib = models.DecimalField(max_digits=14, decimal_places=3, default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)
    gpu_hours = _money(default=0)
    rate = _money(default=0, help_text="per GPU-hour (tokens: 0)")
    cost = _money(default=0)
    currency = models.CharField(max_length=3, default="USD")
    final = models.BooleanField(default=False)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    all_tenants = models.Manager()
    objects = TenantScopedManager()

    class Meta:
        default_manager_name = "all_tenants"
        ordering = ("-start", "-id")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "event_id"], name="usage_event_once_per_tenant"),
            models.UniqueConstraint(
                fields=["job_uid", "run"], condition=models.Q(job_uid__isnull=False), name="usage_one_record_per_run"
            ),
            models.UniqueConstraint(
                fields=["job_pk"], condition=models.Q(final=False), name="usage_one_open_record_per_job"
            ),
            models.UniqueConstraint(
                fields=["reservation_pk", "run"],
                condition=models.Q(reservation_pk__isnull=False),
                name="usage_one_record_per_reservation_run",
            ),
            models.UniqueConstraint(
                fields=["reservation_pk"],
                condition=models.Q(final=False, reservation_pk__isnull=False),
                name="usage_one_open_record_per_reservation",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "start"], name="usage_tenant_start_idx")]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None and UsageRecord.all_tenants.filter(pk=self.pk, final=True).exists():
            raise ImmutableError(f"usage record {self.name} is final: it cannot change")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if UsageRecord.all_tenants.filter(pk=self.pk, final=True).exists():
            raise ImmutableError(f"usage record {self.name} is final: it cannot be deleted")
        return super().delete(*args, **kwargs)
