"""Stripe webhook events Gryvia has processed (apps.billing.services.stripe_sync)."""

from __future__ import annotations

from django.db import models


class StripeEvent(models.Model):
    """One Stripe event that the webhook handled, stored in the transaction that applied it.

    The unique `event_id` makes a delivery of the same event a second time (Stripe retries, replays) change nothing:
    the second insert fails, so its handling is skipped, also when both deliveries arrive at once.
    """

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=100)
    invoice = models.ForeignKey(
        "billing.Invoice", on_delete=models.PROTECT, null=True, blank=True, related_name="stripe_events"
    )
    stripe_invoice_id = models.CharField(max_length=255, blank=True, default="")
    created = models.DateTimeField(help_text="when Stripe created the event")
    received_at = models.DateTimeField(auto_now_add=True, db_index=True)
    outcome = models.CharField(max_length=300, help_text="what Gryvia did with it")

    class Meta:
        ordering = ("-received_at", "-id")

    def __str__(self) -> str:
        return f"{self.event_id} ({self.type})"
