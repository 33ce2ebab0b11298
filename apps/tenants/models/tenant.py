from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from ..choices import TenantPhase

DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit",
)


class Tenant(models.Model):
    """A customer of the platform (`GryviaTenant`): its own namespace `tenant-<slug>`, members, keys and ceilings.

    Spec fields are desired state; `status_*` fields are written by the tenant reconciler only. `generation`
    increments on every spec change (members included, since they become RoleBindings).
    """

    slug = models.CharField(max_length=53, unique=True, validators=[DNS_LABEL])
    display_name = models.CharField(max_length=200, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)
    suspended = models.BooleanField(default=False, help_text="Refuses new work and API writes; running work continues")
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="All GPU types together; empty: no limit")
    gpu_type_ceilings = models.JSONField(default=dict, blank=True, help_text='{"H100": 8, "A100": 16}')
    max_cpu = models.CharField(max_length=20, blank=True, default="", help_text="Kubernetes quantity, e.g. 64")
    max_memory = models.CharField(max_length=20, blank=True, default="", help_text="Kubernetes quantity, e.g. 256Gi")
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="LLM gateway: input + output tokens per UTC day, all keys; empty: no limit"
    )
    archived_at = models.DateTimeField(null=True, blank=True, db_index=True)

    generation = models.PositiveBigIntegerField(default=1)
    observed_generation = models.PositiveBigIntegerField(default=0)
    status_phase = models.CharField(max_length=20, choices=TenantPhase.choices, default=TenantPhase.PENDING)
    status_message = models.TextField(blank=True, default="")
    status_applied = models.JSONField(default=dict, blank=True, help_text="object key -> spec hash last applied")
    status_reconciled_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    AUDIT_FIELDS = (
        "slug",
        "display_name",
        "labels",
        "suspended",
        "max_gpus",
        "gpu_type_ceilings",
        "max_cpu",
        "max_memory",
        "tokens_per_day",
        "archived_at",
    )

    class Meta:
        ordering = ("slug",)

    def __str__(self) -> str:
        return self.slug

    @property
    def namespace(self) -> str:
        return f"tenant-{self.slug}"

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None
