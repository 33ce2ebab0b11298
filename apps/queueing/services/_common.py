"""Helpers every queueing service shares: the audit row, the platform-staff check and field validation."""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError

from apps.core.audit import audit_record, snapshot
from apps.core.principal import Principal

from ..models import Cohort, PriorityClass, Queue, Reservation

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_TYPES = {Cohort: "cohort", Queue: "queue", PriorityClass: "priority_class", Reservation: "reservation"}


def _audit(actor: Principal, action: str, obj: Any, before: Any, after: Any) -> None:
    tenant = getattr(obj, "tenant", None) if isinstance(obj, Queue | Reservation) else None
    audit_record(
        actor=actor,
        action=action,
        obj=obj,
        object_type=_TYPES[type(obj)],
        object_id=str(obj.pk) if isinstance(obj, Reservation) else obj.name,
        tenant_id=tenant.pk if tenant is not None else None,
        tenant_slug=tenant.slug if tenant is not None else "",
        before=before,
        after=after,
    )


def _require_platform(actor: Principal, what: str) -> None:
    if not actor.is_platform:
        raise PermissionError(f"only platform staff can create, change or delete {what}")


def _reject_unknown(changes: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValidationError({name: "unknown field, or one that cannot be changed" for name in unknown})


def _full_clean(obj: Any, exclude: list[str] | None = None) -> None:
    obj.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)


def _locked_and_changed(queryset: Any, pk: int, audit_fields: Any, changes: dict[str, Any]) -> tuple[Any, Any]:
    """The row locked for the update (select_for_update), its audit snapshot before, and `changes` set on it (not
    saved: the caller validates, then saves and audits if the snapshot moved)."""
    obj = queryset.select_for_update().get(pk=pk)
    before = snapshot(obj, audit_fields)
    for field, value in changes.items():
        setattr(obj, field, value)
    return obj, before
