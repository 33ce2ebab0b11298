"""Webhook endpoints and deliveries: every change goes through these functions, in a transaction, audited.

An endpoint's secret is generated here, returned once (create, rotate) and stored only encrypted; the audit log
says `secret: "set"` or `"rotated"`, never the value. A URL whose host is a literal refused address (or plain
http outside the operator's allow-list) is refused with a ValidationError naming `url`; names are resolved and
checked at every delivery (apps.core.netguard). Errors: ValidationError (400), PermissionError (403),
Conflict (409).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.core import crypto, netguard
from apps.core import events as core_events
from apps.core.audit import snapshot
from apps.core.errors import Conflict
from apps.core.periodic import nudge
from apps.core.principal import Principal
from apps.core.scoping import tenant_scope
from apps.tenants.models import Tenant

from . import signing
from .audit import SYSTEM, audit_change, endpoint_snapshot
from .choices import DeliveryStatus, Format
from .delivery import DrainStats, claim, send_and_record
from .failures import endpoint_failures_record
from .models import Delivery, WebhookEndpoint
from .outbox import DRAIN

__all__ = [
    "DRAIN",
    "SUBSCRIBABLE",
    "SYSTEM",
    "UPDATE_FIELDS",
    "WRITE",
    "delivery_redeliver",
    "endpoint_create",
    "endpoint_delete",
    "endpoint_failures_record",
    "endpoint_ping",
    "endpoint_rotate_secret",
    "endpoint_update",
    "validate_fields",
    "validate_url",
]

WRITE = "webhooks:write"
SUBSCRIBABLE = tuple(t for t in core_events.EVENT_TYPES if t != "ping") + core_events.RESERVED_EVENT_TYPES
UPDATE_FIELDS = WebhookEndpoint.AUDIT_FIELDS
_MAX_SELECTORS = 20


def _require_write(actor: Principal, tenant: Tenant) -> None:
    if not actor.has_scope(WRITE, tenant.pk):
        raise PermissionError(f"this credential lacks the scope {WRITE!r} in tenant {tenant.slug}")


# --- validation ----------------------------------------------------------------------------------------------------


def validate_url(url: Any) -> str:
    """The URL as stored. Refuses literal non-public addresses, userinfo, fragments, and plain http unless the
    operator allow-lists a range (names are checked when they are resolved, at every delivery)."""
    if not isinstance(url, str) or not url.strip():
        raise ValidationError({"url": "is required"})
    url = url.strip()
    if len(url) > 2048:
        raise ValidationError({"url": f"must be at most 2048 characters (got {len(url)})"})
    if "#" in url:
        raise ValidationError({"url": "may not have a fragment (#...)"})
    allow = netguard.networks(settings.GRYVIA_WEBHOOK_ALLOW_CIDRS)
    try:
        target = netguard.parse(url, allow=allow)
    except netguard.AddressRefused as exc:
        raise ValidationError({"url": str(exc)}) from exc
    if target.scheme == "http" and not allow:
        raise ValidationError({"url": "must be https (plain http only reaches operator allow-listed ranges)"})
    return url


def validate_fields(fields: dict[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    if "url" in out:
        out["url"] = validate_url(out["url"])
    if "events" in out:
        events = out["events"]
        if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
            raise ValidationError({"events": "must be a non-empty list of event types"})
        unknown = sorted(set(events) - set(SUBSCRIBABLE))
        if unknown:
            known = ", ".join(SUBSCRIBABLE)
            raise ValidationError({"events": f"unknown event type(s) {', '.join(unknown)}; known: {known}"})
        out["events"] = sorted(set(events), key=SUBSCRIBABLE.index)
    if "format" in out and out["format"] not in Format.values:
        raise ValidationError({"format": f"must be one of {', '.join(Format.values)}"})
    if "job_names" in out:
        names = out["job_names"] if out["job_names"] is not None else []
        if not isinstance(names, list) or not all(isinstance(n, str) and 0 < len(n) <= 200 for n in names):
            raise ValidationError({"job_names": "must be a list of job name patterns (* and ? match any characters)"})
        if len(names) > _MAX_SELECTORS:
            raise ValidationError({"job_names": f"at most {_MAX_SELECTORS} patterns"})
        out["job_names"] = names
    if "job_labels" in out:
        labels = out["job_labels"] if out["job_labels"] is not None else {}
        pairs = labels.items() if isinstance(labels, dict) else [(None, None)]
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in pairs):
            raise ValidationError({"job_labels": "must map label names to values (strings)"})
        if len(labels) > _MAX_SELECTORS:
            raise ValidationError({"job_labels": f"at most {_MAX_SELECTORS} labels"})
        out["job_labels"] = labels
    if "description" in out and len(out["description"] or "") > 500:
        raise ValidationError({"description": "must be at most 500 characters"})
    if "enabled" in out and not isinstance(out["enabled"], bool):
        raise ValidationError({"enabled": "must be true or false"})
    return out


# --- endpoints -----------------------------------------------------------------------------------------------------


@transaction.atomic
def endpoint_create(
    *,
    actor: Principal,
    tenant: Tenant,
    url: str,
    events: list[str],
    enabled: bool = True,
    format: str = Format.STANDARD,
    description: str = "",
    job_names: list[str] | None = None,
    job_labels: dict[str, str] | None = None,
) -> tuple[WebhookEndpoint, str]:
    """Register an endpoint; returns it and its secret (shown this once)."""
    _require_write(actor, tenant)
    values = validate_fields(
        dict(
            url=url,
            events=events,
            enabled=enabled,
            format=format,
            description=description or "",
            job_names=job_names or [],
            job_labels=job_labels or {},
        )
    )
    secret = signing.secret_generate()
    with tenant_scope(tenant):
        endpoint = WebhookEndpoint.objects.create(
            tenant=tenant, secret_encrypted=crypto.encrypt(secret), created_by=actor.label, **values
        )
    audit_change(actor, "webhook.create", endpoint, None, {**endpoint_snapshot(endpoint), "secret": "set"})
    return endpoint, secret


@transaction.atomic
def endpoint_update(*, actor: Principal, endpoint: WebhookEndpoint, **changes: Any) -> WebhookEndpoint:
    """Change any of UPDATE_FIELDS. Enabling a disabled endpoint clears its run of failures."""
    unknown = sorted(set(changes) - set(UPDATE_FIELDS))
    if unknown:
        raise ValidationError({name: "unknown field, or one that cannot be changed" for name in unknown})
    with tenant_scope(endpoint.tenant_id):
        endpoint = WebhookEndpoint.objects.select_for_update().select_related("tenant").get(pk=endpoint.pk)
    _require_write(actor, endpoint.tenant)
    values = validate_fields(changes)
    before = endpoint_snapshot(endpoint)
    fields = [name for name, value in values.items() if getattr(endpoint, name) != value]
    if not fields:
        return endpoint
    if values.get("enabled") is True and not endpoint.enabled:
        endpoint.consecutive_failures, endpoint.disabled_reason = 0, ""
        fields += ["consecutive_failures", "disabled_reason"]
    for name in fields:
        if name in values:
            setattr(endpoint, name, values[name])
    endpoint.save(update_fields=[*fields, "updated_at"])
    audit_change(actor, "webhook.update", endpoint, before, endpoint_snapshot(endpoint))
    if endpoint.enabled:
        nudge(DRAIN)
    return endpoint


@transaction.atomic
def endpoint_delete(*, actor: Principal, endpoint: WebhookEndpoint) -> None:
    """Delete the endpoint with its deliveries and their attempts."""
    _require_write(actor, endpoint.tenant)
    audit_change(actor, "webhook.delete", endpoint, endpoint_snapshot(endpoint), None)
    endpoint.delete()


@transaction.atomic
def endpoint_rotate_secret(
    *, actor: Principal, endpoint: WebhookEndpoint, grace_seconds: int | None = None
) -> tuple[WebhookEndpoint, str]:
    """A new secret (returned this once). The old one also signs for `grace_seconds` (default
    GRYVIA_WEBHOOK_ROTATION_GRACE_S; 0 ends it now), so receivers can switch without losing a delivery."""
    with tenant_scope(endpoint.tenant_id):
        endpoint = WebhookEndpoint.objects.select_for_update().select_related("tenant").get(pk=endpoint.pk)
    _require_write(actor, endpoint.tenant)
    grace = settings.GRYVIA_WEBHOOK_ROTATION_GRACE_S if grace_seconds is None else grace_seconds
    if isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= 7 * 86400:
        raise ValidationError({"grace_seconds": "must be a whole number of seconds from 0 to 604800 (7 days)"})
    before = snapshot(endpoint, ("previous_secret_expires_at",))
    secret = signing.secret_generate()
    endpoint.previous_secret_encrypted = endpoint.secret_encrypted if grace else ""
    endpoint.previous_secret_expires_at = timezone.now() + dt.timedelta(seconds=grace) if grace else None
    endpoint.secret_encrypted = crypto.encrypt(secret)
    endpoint.save(
        update_fields=["secret_encrypted", "previous_secret_encrypted", "previous_secret_expires_at", "updated_at"]
    )
    after = {"secret": "rotated", **snapshot(endpoint, ("previous_secret_expires_at",))}
    audit_change(actor, "webhook.rotate_secret", endpoint, before, after)
    return endpoint, secret


def endpoint_ping(*, actor: Principal, endpoint: WebhookEndpoint) -> Delivery:
    """Send a `ping` event to this endpoint now (one attempt inline; retried like any delivery if it fails)."""
    with transaction.atomic():
        with tenant_scope(endpoint.tenant_id):
            endpoint = WebhookEndpoint.objects.select_related("tenant").get(pk=endpoint.pk)
        _require_write(actor, endpoint.tenant)
        if not endpoint.enabled:
            raise Conflict(f"webhook {endpoint.pk} is disabled: enable it before pinging it")
        data = {"endpoint": endpoint.pk, "url": endpoint.url, "requested_by": actor.label}
        core_events.emit(tenant=endpoint.tenant, type="ping", data=data, endpoint_ids=[endpoint.pk])
        with tenant_scope(endpoint.tenant_id):
            delivery = Delivery.objects.filter(endpoint=endpoint, event__type="ping").order_by("-id").first()
        audit_change(actor, "webhook.ping", endpoint, None, {"delivery": delivery.pk})
    batch = claim(now=timezone.now(), limit=1, only_ids=[delivery.pk])
    if batch:  # no transaction is open here: the request goes out after the delivery row is committed
        send_and_record(batch, now=timezone.now(), stats=DrainStats())
    with tenant_scope(delivery.tenant_id):
        return Delivery.objects.select_related("event", "endpoint").get(pk=delivery.pk)


# --- deliveries ----------------------------------------------------------------------------------------------------


@transaction.atomic
def delivery_redeliver(*, actor: Principal, delivery: Delivery) -> Delivery:
    """Send a delivery again now, with the same `webhook-id`, for a fresh retry horizon. Earlier attempts stay."""
    with tenant_scope(delivery.tenant_id):
        delivery = Delivery.objects.select_for_update().select_related("tenant", "endpoint").get(pk=delivery.pk)
    _require_write(actor, delivery.tenant)
    if not delivery.endpoint.enabled:
        raise Conflict(f"webhook {delivery.endpoint_id} is disabled: enable it before redelivering")
    now = timezone.now()
    if delivery.status == DeliveryStatus.PENDING and delivery.locked_until and delivery.locked_until > now:
        raise Conflict(f"delivery {delivery.pk} is being sent right now")
    before = snapshot(delivery, Delivery.AUDIT_FIELDS)
    delivery.status, delivery.next_attempt_at, delivery.first_attempt_at = DeliveryStatus.PENDING, now, None
    delivery.finished_at, delivery.locked_until, delivery.claim = None, None, ""
    fields = ["status", "next_attempt_at", "first_attempt_at", "finished_at", "locked_until", "claim"]
    delivery.save(update_fields=[*fields, "updated_at"])
    audit_change(actor, "webhook.redeliver", delivery, before, snapshot(delivery, Delivery.AUDIT_FIELDS))
    nudge(DRAIN)
    return delivery
