"""The per-tenant hash-chained ledger: its head (the lock appends take) and its entries, append-only."""

from __future__ import annotations

from django.db import models

from apps.core.scoping import TenantScopedManager

from .usage import ImmutableError


class LedgerHead(models.Model):
    """The head of a tenant's chain. Appending takes this row's lock first, so two appends never fork the chain."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.PROTECT, related_name="+", primary_key=True)
    sequence = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.tenant_id} @ {self.sequence}"


class LedgerEntry(models.Model):
    """One final usage record, sealed into its tenant's SHA-256 hash chain (version `v1`, apps.billing.services.ledger).

    Every hashed field is stored as the exact string that was hashed, so verification recomputes from the row
    alone. Rows are append-only: the database refuses UPDATE and DELETE (apps.billing.models.triggers).
    """

    # Indexed by the unique (tenant, sequence) below. No database constraint (a per-row check at commit): an entry
    # names its tenant in `tenant_slug`, which is hashed, and tenants are never deleted.
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    tenant_slug = models.CharField(max_length=63)
    sequence = models.PositiveBigIntegerField()
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    record_namespace = models.CharField(max_length=70)
    record_name = models.CharField(max_length=200)
    record_uid = models.CharField(max_length=36, unique=True)
    kind = models.CharField(max_length=20)
    job = models.CharField(max_length=200, blank=True, default="")
    sku = models.CharField(max_length=63, blank=True, default="")
    start = models.CharField(max_length=20)
    end = models.CharField(max_length=20)
    gpu_hours = models.CharField(max_length=30)
    rate = models.CharField(max_length=30)
    cost = models.CharField(max_length=30)
    currency = models.CharField(max_length=3)
    recorded_at = models.CharField(max_length=20)
    hash_version = models.CharField(max_length=4, default="v1")
    hash = models.CharField(max_length=64)

    all_tenants = models.Manager()
    objects = TenantScopedManager()

    class Meta:
        default_manager_name = "all_tenants"
        ordering = ("tenant", "sequence")
        verbose_name_plural = "ledger entries"
        constraints = [models.UniqueConstraint(fields=["tenant", "sequence"], name="ledger_sequence_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_slug} #{self.sequence} {self.hash[:12]}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ImmutableError(f"ledger entry {self.tenant_slug} #{self.sequence} cannot change: append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ImmutableError(f"ledger entry {self.tenant_slug} #{self.sequence} cannot be deleted: append-only")
