"""The audit log: every state change records who, what, when and the object before and after."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

from django.db import models

from . import events
from .models import AuditEntry
from .principal import Principal


def _json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, models.Model):
        return value.pk
    return value


def snapshot(obj: models.Model, fields: tuple[str, ...]) -> dict[str, Any]:
    """A JSON-safe view of the fields of `obj` worth auditing (never secrets)."""
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(obj, name)
        out[name] = [_json_value(v) for v in value] if isinstance(value, list) else _json_value(value)
    return out


def audit_record(
    *,
    actor: Principal,
    action: str,
    obj: models.Model,
    object_type: str,
    object_id: str,
    tenant_id: int | None,
    tenant_slug: str = "",
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> AuditEntry:
    """Write one audit row in the caller's transaction, and broadcast the change once it commits."""
    entry = AuditEntry.all_tenants.create(
        tenant_id=tenant_id,
        tenant_slug=tenant_slug,
        actor=actor.label[:200],
        actor_user_id=actor.user_id,
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_repr=str(obj)[:300],
        before=before,
        after=after,
    )
    events.broadcast(tenant_id=tenant_id, kind=object_type, object_id=object_id, event=action, data=after)
    return entry
