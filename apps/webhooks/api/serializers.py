"""Input and output of webhook endpoints and deliveries (strict: unknown fields are errors).

The secret is never read back: it is in the response of a create and of a rotation only.
"""

from __future__ import annotations

from rest_framework import serializers

from apps.core.api.serializers import StrictModelSerializer, StrictSerializer

from ..choices import Format
from ..models import Delivery, DeliveryAttempt, WebhookEndpoint
from ..services import SUBSCRIBABLE


class WebhookEndpointSerializer(StrictModelSerializer):
    """A webhook endpoint. `events` lists the event types it receives; `job_names` (glob patterns) and
    `job_labels` narrow job events to matching jobs."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    url = serializers.CharField(max_length=2048)
    events = serializers.ListField(child=serializers.ChoiceField(choices=SUBSCRIBABLE), allow_empty=False)
    format = serializers.ChoiceField(choices=Format.choices, default=Format.STANDARD)
    job_names = serializers.ListField(child=serializers.CharField(max_length=200), required=False)
    job_labels = serializers.DictField(child=serializers.CharField(max_length=200), required=False)
    secret_rotation_ends_at = serializers.DateTimeField(source="previous_secret_expires_at", read_only=True)

    class Meta:
        model = WebhookEndpoint
        fields = (
            "id",
            "tenant",
            "url",
            "events",
            "enabled",
            "format",
            "description",
            "job_names",
            "job_labels",
            "consecutive_failures",
            "disabled_reason",
            "secret_rotation_ends_at",
            "created_by",
            "created_at",
            "updated_at",
        )
        read_only_fields = (
            "id",
            "consecutive_failures",
            "disabled_reason",
            "created_by",
            "created_at",
            "updated_at",
        )


class WebhookEndpointWithSecretSerializer(WebhookEndpointSerializer):
    """The endpoint and its secret (`whsec_…`), shown this once: store it where the receiver reads it."""

    secret = serializers.CharField(read_only=True)

    class Meta(WebhookEndpointSerializer.Meta):
        fields = (*WebhookEndpointSerializer.Meta.fields, "secret")


class RotateSecretSerializer(StrictSerializer):
    grace_seconds = serializers.IntegerField(
        min_value=0, max_value=7 * 86400, required=False, help_text="how long the old secret also signs"
    )


class DeliveryAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = (
            "number",
            "status",
            "status_code",
            "latency_ms",
            "error_code",
            "error",
            "response_excerpt",
            "address",
            "started_at",
            "finished_at",
        )


class DeliverySerializer(serializers.ModelSerializer):
    """One event to one endpoint: its status, when it is tried next, and every attempt so far."""

    endpoint = serializers.IntegerField(source="endpoint_id", read_only=True)
    event_id = serializers.CharField(source="event.event_id", read_only=True)
    type = serializers.CharField(source="event.type", read_only=True)
    subject = serializers.CharField(source="event.subject", read_only=True)
    attempt_log = DeliveryAttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = (
            "id",
            "endpoint",
            "event_id",
            "type",
            "subject",
            "message_id",
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "last_error_code",
            "last_error",
            "created_at",
            "finished_at",
            "attempt_log",
        )
