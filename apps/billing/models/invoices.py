"""Invoices (Draft -> Finalized -> Paid or Void) with their lines and per-tenant numbering.

An invoice's lines come from the tenant's ledger entries of the period (apps.billing.services.invoicing). Once an
invoice is no longer a Draft, its lines and amounts never change: `save`/`delete` refuse it here, and the services
move its state with conditional updates only.
"""

from __future__ import annotations

from django.db import models

from apps.core.scoping import TenantScopedManager

from ..choices import InvoiceState
from .usage import CURRENCY, ImmutableError


def _amount(**kw) -> models.DecimalField:
    return models.DecimalField(max_digits=20, decimal_places=6, **kw)


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
    # Stripe (test mode; apps.billing.services.stripe_sync). Written by conditional updates only, also once finalized.
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
