"""Chargeback's cost centers and which one each tenant's invoices are charged back to."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from apps.core.models import TimestampedModel

COST_CENTER_CODE = RegexValidator(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", "lowercase letters, digits and '-'")


class CostCenter(TimestampedModel):
    """A platform-level cost center for chargeback: tenants map to it (TenantCostCenter), and its report adds
    `overhead_percent` of their invoiced amounts as platform overhead."""

    code = models.CharField(max_length=63, unique=True, validators=[COST_CENTER_CODE])
    name = models.CharField(max_length=200)
    overhead_percent = models.DecimalField(
        max_digits=7,
        decimal_places=3,
        default=0,
        validators=[MinValueValidator(0), MaxValueValidator(1000)],
        help_text="platform overhead added to the tenants' amounts, in percent (0 to 1000)",
    )
    description = models.CharField(max_length=500, blank=True, default="")

    AUDIT_FIELDS = ("code", "name", "overhead_percent", "description")

    class Meta:
        ordering = ("code",)

    def __str__(self) -> str:
        return f"{self.code} ({self.name})"


class TenantCostCenter(models.Model):
    """Which cost center a tenant's invoices are charged back to (a tenant belongs to at most one)."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.PROTECT, related_name="+", primary_key=True)
    cost_center = models.ForeignKey(CostCenter, on_delete=models.PROTECT, related_name="tenant_links")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("cost_center", "tenant")
        verbose_name = "tenant cost center"

    def __str__(self) -> str:
        return f"{self.tenant_id} -> {self.cost_center_id}"
