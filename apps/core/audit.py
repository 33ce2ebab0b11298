"""The audit log: every state change records who, what, when and the object before and after."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

from django.db import models

from . import events
from .db.bulk import bulk_insert
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
) -> None:
    """Write one audit row in the caller's transaction, and broadcast the change once it commits."""
    audit_record_many(
        [
            dict(
                actor=actor,
                action=action,
                obj=obj,
                object_type=object_type,
                object_id=object_id,
                tenant_id=tenant_id,
                tenant_slug=tenant_slug,
                before=before,
                after=after,
            )
        ]
    )


def audit_record_many(records: list[dict[str, Any]]) -> int:
    """`audit_record` for many changes (each a dict of its keyword arguments): one INSERT, one broadcast trip.
    Returns how many rows were written."""
    if not records:
        return 0
    count = bulk_insert(
        AuditEntry,
        [
            {
                "tenant_id": r["tenant_id"],
                "tenant_slug": r.get("tenant_slug", ""),
                "actor": r["actor"].label[:200],
                "actor_user_id": r["actor"].user_id,
                "action": r["action"],
                "object_type": r["object_type"],
                "object_id": r["object_id"],
                "object_repr": str(r["obj"])[:300],
                "before": r["before"],
                "after": r["after"],
            }
            for r in records
        ],
    )
    events.broadcast_many(
        [
            {
                "tenant_id": r["tenant_id"],
                "kind": r["object_type"],
                "object_id": r["object_id"],
                "event": r["action"],
                "data": r["after"],
            }
            for r in records
        ]
    )
    return count
