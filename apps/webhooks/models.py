"""Webhook endpoints, the event outbox, deliveries and their attempts."""

from __future__ import annotations

import uuid

from django.db import models

from apps.core.models import TenantOwnedModel

from .choices import AttemptStatus, DeliveryStatus, Format


def _event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def _message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


class WebhookEndpoint(TenantOwnedModel):
    """A URL of a tenant's that receives the events it subscribes to, signed with the endpoint's secret.

    The secret (`whsec_` + base64 of 32 random bytes) is stored encrypted (apps.core.crypto) and shown once.
    After a rotation the previous secret also signs until `previous_secret_expires_at`. Job events can be
    narrowed by `job_names` (glob patterns) and `job_labels` (all must match). `consecutive_failures` counts
    deliveries that failed in a row; at GRYVIA_WEBHOOK_DISABLE_AFTER the endpoint is disabled.
    """

    url = models.CharField(max_length=2048)
    events = models.JSONField(default=list, help_text="event types it receives")
    enabled = models.BooleanField(default=True)
    format = models.CharField(max_length=10, choices=Format.choices, default=Format.STANDARD)
    description = models.CharField(max_length=500, blank=True, default="")
    job_names = models.JSONField(default=list, blank=True, help_text="job name glob patterns (any matches)")
    job_labels = models.JSONField(default=dict, blank=True, help_text="job labels that must all match")
    secret_encrypted = models.TextField(editable=False)
    previous_secret_encrypted = models.TextField(blank=True, default="", editable=False)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    consecutive_failures = models.PositiveIntegerField(default=0)
    disabled_reason = models.CharField(max_length=300, blank=True, default="")
    created_by = models.CharField(max_length=200, blank=True, default="")

    AUDIT_FIELDS = ("url", "events", "enabled", "format", "description", "job_names", "job_labels")

    class Meta(TenantOwnedModel.Meta):
        indexes = [models.Index(fields=["tenant", "enabled"], name="webhook_tenant_enabled_idx")]

    def __str__(self) -> str:
        return f"webhook {self.pk} {self.url}"


class Event(TenantOwnedModel):
    """One event for outside receivers, written in the transaction of the change that caused it (the outbox).

    Only events some endpoint receives are stored; each has one Delivery per receiving endpoint.
    """

    event_id = models.CharField(max_length=40, unique=True, default=_event_id, editable=False)
    type = models.CharField(max_length=50, db_index=True)
    subject = models.CharField(max_length=200, blank=True, default="", help_text="what it is about: job/<name>")
    data = models.JSONField(default=dict)

    class Meta(TenantOwnedModel.Meta):
        ordering = ("-created_at", "-id")

    def __str__(self) -> str:
        return f"{self.event_id} {self.type}"


class Delivery(TenantOwnedModel):
    """One event to one endpoint: sent until it succeeds or the retry horizon passes.

    `message_id` is the `webhook-id` header, the same on every attempt (receivers deduplicate on it). A worker
    claims a due delivery by setting `locked_until` (its lease) and `claim`; only that claim may record the
    attempt's result. A lease that ran out means the worker died: the delivery is due again.
    """

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    message_id = models.CharField(max_length=40, unique=True, default=_message_id, editable=False)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(db_index=True)
    first_attempt_at = models.DateTimeField(null=True, blank=True, help_text="the retry horizon counts from here")
    locked_until = models.DateTimeField(null=True, blank=True)
    claim = models.CharField(max_length=32, blank=True, default="")
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error_code = models.CharField(max_length=40, blank=True, default="")
    last_error = models.CharField(max_length=500, blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)

    AUDIT_FIELDS = ("status", "attempts", "next_attempt_at", "last_status_code", "last_error_code")

    class Meta(TenantOwnedModel.Meta):
        ordering = ("-created_at", "-id")
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(
                fields=["next_attempt_at", "id"],
                name="webhook_delivery_due_idx",
                condition=models.Q(status="pending"),
            ),
            models.Index(fields=["endpoint", "-created_at", "-id"], name="webhook_delivery_endpoint_idx"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.status})"


class DeliveryAttempt(models.Model):
    """One POST of a delivery (or one the guard refused): what came back, how long it took, what went wrong."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=AttemptStatus.choices, default=AttemptStatus.IN_FLIGHT)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True, default="")
    error = models.CharField(max_length=500, blank=True, default="")
    response_excerpt = models.CharField(max_length=1000, blank=True, default="")
    address = models.CharField(max_length=64, blank=True, default="", help_text="the IP that was connected to")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("delivery", "number")
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_unique_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id} ({self.status})"
