"""Base models shared by every app, and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .scoping import TenantScopedManager


class TimestampedModel(models.Model):
    """Adds created/updated times."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class TenantOwnedModel(TimestampedModel):
    """A row that belongs to one tenant. `objects` is fail-closed (see apps.core.scoping)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+", db_index=True)

    all_tenants = models.Manager()
    objects = TenantScopedManager()

    class Meta:
        abstract = True
        default_manager_name = "all_tenants"


class AuditEntry(models.Model):
    """One state change: who did what to which object, with the object before and after, and when.

    Rows are append-only. `tenant` is the tenant the object belongs to (a tenant's own changes are in its log);
    it is null only for platform-level objects that belong to no tenant.
    """

    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=True
    )
    tenant_slug = models.CharField(max_length=63, blank=True, default="")
    actor = models.CharField(max_length=200, help_text="user:<name>, key:<id>, system:<component>")
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=100, db_index=True)
    object_type = models.CharField(max_length=100, db_index=True)
    object_id = models.CharField(max_length=200, db_index=True)
    object_repr = models.CharField(max_length=300, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    all_tenants = models.Manager()
    objects = TenantScopedManager()

    class Meta:
        default_manager_name = "all_tenants"
        ordering = ("-created_at", "-id")
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_type}/{self.object_id}"


class TableEpoch(models.Model):
    """A watched table's epoch (apps.core.db.epochs): a new value with each write to it, set by database triggers."""

    table_name = models.CharField(max_length=63, primary_key=True)
    epoch = models.BigIntegerField()

    class Meta:
        db_table = "core_tableepoch"

    def __str__(self) -> str:
        return f"{self.table_name}@{self.epoch}"
