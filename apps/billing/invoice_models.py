"""Invoices (Draft -> Finalized -> Paid or Void) with their lines and per-tenant numbering, and chargeback's cost
centers. Imported by apps.billing.models, so Django sees them as billing models.

An invoice's lines come from the tenant's ledger entries of the period (apps.billing.invoicing). Once an invoice
is no longer a Draft, its lines and amounts never change: `save`/`delete` refuse it here, and the services move
its state with conditional updates only.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from apps.core.models import TimestampedModel
from apps.core.scoping import TenantScopedManager

from .models import CURRENCY, ImmutableError

COST_CENTER_CODE = RegexValidator(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", "lowercase letters, digits and '-'")


def _amount(**kw) -> models.DecimalField:
    return models.DecimalField(max_digits=20, decimal_places=6, **kw)


class InvoiceState(models.TextChoices):
    DRAFT = "draft"
    FINALIZED = "finalized"
    PAID = "paid"
    VOID = "void"


class InvoiceCounter(models.Model):
    """The last invoice number given to a tenant. Finalizing locks this row (SELECT … FOR UPDATE) and takes the next
    number in the transaction that finalizes, so numbers have no gaps and no duplicates."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.PROTECT, related_name="+", primary_key=True)
    last = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.last}"


class Invoice(models.Model):
    """A tenant's invoice for the period [period_start, period_end): usage whose start lies in it, from the ledger.

    A Draft has no number and may be deleted or voided. Finalizing recomputes its lines from the ledger, checks that
    the period's usage is complete and the chain intact, and gives it the tenant's next number
    (`INV-<slug>-NNNNNN`). A Finalized invoice may become Paid or Void; Paid and Void are terminal.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=10, choices=InvoiceState.choices, default=InvoiceState.DRAFT)
    sequence = models.PositiveIntegerField(null=True, blank=True, help_text="1, 2, … per tenant, at finalization")
    number = models.CharField(max_length=80, null=True, blank=True, unique=True, help_text="INV-<slug>-NNNNNN")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField(help_text="exclusive")
    currency = models.CharField(max_length=3, blank=True, default="", validators=[CURRENCY])
    subtotal = _amount(default=0, help_text="the sum of the rounded line amounts")
    # What the lines were computed from: the ledger entries of the period, and the chain's head at that moment.
    ledger_entries = models.PositiveIntegerField(default=0)
    ledger_first_sequence = models.PositiveBigIntegerField(null=True, blank=True)
    ledger_last_sequence = models.PositiveBigIntegerField(null=True, blank=True)
    ledger_head_sequence = models.PositiveBigIntegerField(default=0)
    ledger_head_hash = models.CharField(max_length=64, blank=True, default="")
    ledger_total = _amount(default=0, help_text="the exact sum of the entries' costs (6 places)")
    note = models.CharField(max_length=500, blank=True, default="")
    computed_at = models.DateTimeField(null=True, blank=True, help_text="when the lines were last computed")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    finalized_at = models.DateTimeField(null=True, blank=True)
    finalized_by = models.CharField(max_length=200, blank=True, default="")
    paid_at = models.DateTimeField(null=True, blank=True)
    paid_by = models.CharField(max_length=200, blank=True, default="")
    payment_reference = models.CharField(max_length=200, blank=True, default="")
    voided_at = models.DateTimeField(null=True, blank=True)
    voided_by = models.CharField(max_length=200, blank=True, default="")
    void_reason = models.CharField(max_length=500, blank=True, default="")
    # Stripe (test mode; apps.billing.stripe_sync). Written by conditional updates only, also once finalized.
    stripe_ref = models.CharField(
        max_length=32, blank=True, default="", help_text="base of the idempotency keys of its Stripe calls"
    )
    stripe_customer_id = models.CharField(max_length=255, blank=True, default="")
    stripe_invoice_id = models.CharField(max_length=255, blank=True, default="")
    stripe_status = models.CharField(max_length=20, blank=True, default="", help_text="the Stripe invoice's status")
    stripe_hosted_url = models.CharField(max_length=500, blank=True, default="")
    stripe_sent_at = models.DateTimeField(null=True, blank=True)
    stripe_sent_by = models.CharField(max_length=200, blank=True, default="")
    stripe_payment_failed_at = models.DateTimeField(null=True, blank=True)
    stripe_last_error = models.CharField(max_length=500, blank=True, default="")

    AUDIT_FIELDS = (
        "state",
        "number",
        "period_start",
        "period_end",
        "currency",
        "subtotal",
        "ledger_entries",
        "ledger_head_sequence",
        "note",
        "finalized_at",
        "paid_at",
        "payment_reference",
        "voided_at",
        "void_reason",
    )

    all_tenants = models.Manager()
    objects = TenantScopedManager()

    class Meta:
        default_manager_name = "all_tenants"
        ordering = ("-period_start", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "sequence"], condition=models.Q(sequence__isnull=False), name="invoice_number_once"
            ),
            models.CheckConstraint(condition=models.Q(period_end__gt=models.F("period_start")), name="invoice_period"),
            models.CheckConstraint(
                condition=models.Q(state__in=["draft", "void"])
                | models.Q(sequence__isnull=False, number__isnull=False),
                name="invoice_numbered_once_final",
            ),
            models.UniqueConstraint(
                fields=["stripe_invoice_id"], condition=~models.Q(stripe_invoice_id=""), name="invoice_stripe_id_once"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "period_start"], name="invoice_tenant_period_idx")]

    def __str__(self) -> str:
        return self.number or f"draft {self.pk} ({self.tenant_id})"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None and self._stored_state() not in (None, InvoiceState.DRAFT):
            raise ImmutableError(f"invoice {self} is {self._stored_state()}: it cannot change")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self._stored_state() != InvoiceState.DRAFT:
            raise ImmutableError(f"invoice {self} is not a draft: it cannot be deleted (void it)")
        return super().delete(*args, **kwargs)

    def _stored_state(self) -> str | None:
        return Invoice.all_tenants.filter(pk=self.pk).values_list("state", flat=True).first()


class InvoiceLine(models.Model):
    """One line of an invoice: the ledger entries of one kind and SKU (tokens: one model) in the period.

    `amount_exact` is the exact sum of the entries' costs; `amount` is it rounded half-up to the currency's minor
    units. Frozen once the invoice is finalized.
    """

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=20)
    sku = models.CharField(max_length=63, blank=True, default="")
    model = models.CharField(max_length=100, blank=True, default="")
    description = models.CharField(max_length=300)
    entries = models.PositiveIntegerField()
    gpu_hours = _amount(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    rate = _amount(null=True, blank=True, help_text="the single rate of its entries, else amount / GPU-hours")
    amount_exact = _amount()
    amount = _amount()
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ("invoice", "position")
        constraints = [models.UniqueConstraint(fields=["invoice", "position"], name="invoice_line_position")]

    def __str__(self) -> str:
        return f"{self.invoice_id}/{self.position} {self.description}"

    def save(self, *args, **kwargs) -> None:
        if self._frozen():
            raise ImmutableError(f"invoice {self.invoice_id} is not a draft: its lines cannot change")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self._frozen():
            raise ImmutableError(f"invoice {self.invoice_id} is not a draft: its lines cannot be deleted")
        return super().delete(*args, **kwargs)

    def _frozen(self) -> bool:
        return Invoice.all_tenants.filter(pk=self.invoice_id).exclude(state=InvoiceState.DRAFT).exists()


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
