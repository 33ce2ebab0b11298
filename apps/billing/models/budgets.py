"""Budgets: a spending limit per tenant and period, its thresholds, and one row per threshold crossed per period.

Spec fields change through apps.billing.services.budgets only (audited); `status_*` is the evaluator's last view.
Writing a budget forgets the cached "some hard budget exists" answer the admission cycle reads
(apps.billing.selectors.budgets).
"""

from __future__ import annotations

from django.core.cache import cache
from django.core.validators import MinValueValidator
from django.db import models, transaction

from apps.core.models import TimestampedModel
from apps.core.scoping import TenantScopedManager
from apps.tenants.models.tenant import DNS_LABEL

from ..choices import BudgetPeriod, BudgetState

DEFAULT_THRESHOLDS = (50, 80, 100)
# "Is there a hard budget" as the admission cycle reads it (apps.billing.selectors.budgets): forgotten whenever a
# budget is written.
HARD_CACHE_KEY = "gryvia:billing:hard-budgets:v1"


def default_thresholds() -> list[int]:
    return list(DEFAULT_THRESHOLDS)


class Budget(TimestampedModel):
    """A spending limit for a period, of one tenant or of a cost center (its tenants together): `amount` in
    `currency`, thresholds in percent of it.

    Spend is the usage in the period in that currency: final records (prorated when they cross a period boundary)
    and open ones priced up to the evaluation. With `hard_limit`, admission holds a new job whose forecast cost
    would take spend past `amount` (apps.jobs.admission). A cost center's budget belongs to no tenant (platform
    staff see and write it); `status_tenants` is its tenants at the last evaluation, what admission applies it to.
    """

    # Exactly one of the two is set. Indexed by the unique (tenant, name) below.
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    cost_center = models.ForeignKey(
        "billing.CostCenter", null=True, blank=True, on_delete=models.PROTECT, related_name="budgets"
    )
    name = models.CharField(max_length=63, validators=[DNS_LABEL])
    period = models.CharField(max_length=10, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTHLY)
    start = models.DateTimeField(null=True, blank=True, help_text="custom period: its first instant")
    end = models.DateTimeField(null=True, blank=True, help_text="custom period: exclusive end")
    amount = models.DecimalField(max_digits=20, decimal_places=6, validators=[MinValueValidator(0)])
    currency = models.CharField(max_length=3, default="USD")
    thresholds = models.JSONField(default=default_thresholds, blank=True, help_text="percentages, ascending")
    hard_limit = models.BooleanField(default=False, help_text="hold new jobs whose forecast would exceed it")
    description = models.CharField(max_length=500, blank=True, default="")
    generation = models.PositiveBigIntegerField(default=1)

    status_state = models.CharField(max_length=10, choices=BudgetState.choices, default=BudgetState.OK)
    status_spent = models.DecimalField(max_digits=20, decimal_places=6, default=0)
    status_period_start = models.DateTimeField(null=True, blank=True)
    status_period_end = models.DateTimeField(null=True, blank=True)
    status_evaluated_at = models.DateTimeField(null=True, blank=True)
    status_message = models.TextField(blank=True, default="")
    status_tenants = models.JSONField(default=list, blank=True, help_text="ids of the tenants it applied to")

    all_tenants = models.Manager()
    objects = TenantScopedManager()

    AUDIT_FIELDS = (
        "name",
        "cost_center_code",
        "period",
        "start",
        "end",
        "amount",
        "currency",
        "thresholds",
        "hard_limit",
        "description",
    )

    class Meta:
        default_manager_name = "all_tenants"
        ordering = ("name", "id")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="budget_unique_name_per_tenant"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(tenant__isnull=True), name="budget_unique_name_per_platform"
            ),
            models.CheckConstraint(
                condition=models.Q(tenant__isnull=True, cost_center__isnull=False)
                | models.Q(tenant__isnull=False, cost_center__isnull=True),
                name="budget_of_a_tenant_or_a_cost_center",
            ),
            models.CheckConstraint(
                condition=models.Q(period="monthly") | models.Q(start__isnull=False, end__gt=models.F("start")),
                name="budget_custom_period_has_window",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.amount} {self.currency} {self.period})"

    @property
    def cost_center_code(self) -> str:
        return self.cost_center.code if self.cost_center_id else ""

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        forget_hard_budgets()

    def delete(self, *args, **kwargs):
        out = super().delete(*args, **kwargs)
        forget_hard_budgets()
        return out


def forget_hard_budgets() -> None:
    """Drop the cached "is there a hard budget" answer now and once the writer's transaction commits."""
    cache.delete(HARD_CACHE_KEY)
    transaction.on_commit(lambda: cache.delete(HARD_CACHE_KEY))


class BudgetEvent(models.Model):
    """A threshold of a budget crossed in one period: recorded once (unique), emitted once as
    `budget.threshold_crossed` (apps.core.events), however many evaluators run at the same time."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="events")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    threshold = models.PositiveIntegerField(help_text="percent of the amount")
    spent = models.DecimalField(max_digits=20, decimal_places=6)
    amount = models.DecimalField(max_digits=20, decimal_places=6)
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(auto_now_add=True)

    all_tenants = models.Manager()

    class Meta:
        default_manager_name = "all_tenants"
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="budget_event_once_per_threshold_and_period"
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.threshold}% @ {self.period_start:%Y-%m-%d}"
