"""Reservation services: a tenant's GPU reservations, set by platform staff (claims: apps.queueing.reservations)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.audit import snapshot
from apps.core.periodic import nudge
from apps.core.principal import Principal
from apps.core.scoping import tenant_scope
from apps.tenants.models import Tenant

from ..models import Reservation
from ._common import _LABEL_VALUE, _audit, _full_clean, _locked_and_changed, _reject_unknown, _require_platform
from .reservation_hooks import reservation_deleting

RESERVATION_FIELDS = ("gpu_type", "count", "start_at", "end_at", "description")
RECONCILE_RESERVATIONS = "reconcile-reservations"  # claims follow a change at once rather than at the next tick


def _check_reservation(reservation: Reservation) -> None:
    if not isinstance(reservation.gpu_type, str) or not _LABEL_VALUE.match(reservation.gpu_type):
        raise ValidationError({"gpu_type": f"{reservation.gpu_type!r} is not a GPU type label value such as H100"})
    count = reservation.count
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValidationError({"count": "must be a positive integer"})
    for field in ("start_at", "end_at"):
        if not isinstance(getattr(reservation, field), dt.datetime):
            raise ValidationError({field: "is required (a date and time)"})
    if reservation.end_at <= reservation.start_at:
        raise ValidationError({"end_at": "must be after start_at"})
    _full_clean(reservation, exclude=["tenant"])


@transaction.atomic
def reservation_create(
    *,
    actor: Principal,
    tenant: Tenant,
    gpu_type: str,
    count: int,
    start_at: dt.datetime,
    end_at: dt.datetime,
    description: str = "",
) -> Reservation:
    """Reserve `count` GPUs of `gpu_type` for `tenant` in [start_at, end_at). Platform staff only."""
    _require_platform(actor, "reservations")
    reservation = Reservation(
        tenant=tenant, gpu_type=gpu_type, count=count, start_at=start_at, end_at=end_at, description=description
    )
    _check_reservation(reservation)
    reservation.save()
    _audit(actor, "reservation.create", reservation, None, snapshot(reservation, Reservation.AUDIT_FIELDS))
    nudge(RECONCILE_RESERVATIONS)
    return reservation


@transaction.atomic
def reservation_update(*, actor: Principal, reservation: Reservation, **changes: Any) -> Reservation:
    _require_platform(actor, "reservations")
    _reject_unknown(changes, RESERVATION_FIELDS)
    with tenant_scope(reservation.tenant_id):
        rows = Reservation.objects.select_related("tenant")
    reservation, before = _locked_and_changed(rows, reservation.pk, Reservation.AUDIT_FIELDS, changes)
    _check_reservation(reservation)
    after = snapshot(reservation, Reservation.AUDIT_FIELDS)
    if after != before:
        reservation.save()
        _audit(actor, "reservation.update", reservation, before, after)
        nudge(RECONCILE_RESERVATIONS)
    return reservation


@transaction.atomic
def reservation_delete(*, actor: Principal, reservation: Reservation) -> None:
    _require_platform(actor, "reservations")
    _audit(actor, "reservation.delete", reservation, snapshot(reservation, Reservation.AUDIT_FIELDS), None)
    reservation_deleting(reservation=reservation)  # billing's hook: its usage record ends now and is sealed
    reservation.delete()
    nudge(RECONCILE_RESERVATIONS)
