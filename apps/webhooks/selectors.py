"""Reading webhook endpoints' deliveries (the API, the CLI and the admin list them newest first)."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from .models import Delivery, DeliveryAttempt, WebhookEndpoint

__all__ = [
    "deliveries_of",
    "delivery_of",
]


def deliveries_of(*, endpoint: WebhookEndpoint) -> QuerySet[Delivery]:
    """The endpoint's deliveries with their event and every attempt, in a fixed number of queries."""
    attempts = Prefetch("attempt_log", queryset=DeliveryAttempt.objects.order_by("number"))
    return (
        Delivery.all_tenants.filter(endpoint=endpoint)
        .select_related("event", "tenant")
        .prefetch_related(attempts)
        .order_by("-created_at", "-id")
    )


def delivery_of(*, endpoint: WebhookEndpoint, delivery_id: str) -> Delivery | None:
    """One delivery of the endpoint (None when the id is not one of its deliveries)."""
    if not str(delivery_id).isdigit():
        return None
    return deliveries_of(endpoint=endpoint).filter(pk=int(delivery_id)).first()
