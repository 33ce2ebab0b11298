"""Hooks for reservation changes. Queueing is below the apps that act on reservations (billing bills the GPUs a
reservation holds), so it cannot call them: they register here from their AppConfig.ready() (billing does in
BillingConfig.ready(); docs/architecture.md, Registries). Hooks run in the caller's transaction, in the order
registered; an exception propagates, so the change it was called for rolls back with it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from ..models import Reservation

__all__ = [
    "on_reservation_claims_written",
    "on_reservation_deleting",
    "reservation_claims_written",
    "reservation_deleting",
]

_claims_written: list[Callable[..., Any]] = []
_deleting: list[Callable[..., Any]] = []


def on_reservation_claims_written(hook: Callable[..., Any]) -> None:
    """Register `hook(now=...)`, called after a reservations pass wrote what every reservation holds."""
    if hook not in _claims_written:
        _claims_written.append(hook)


def on_reservation_deleting(hook: Callable[..., Any]) -> None:
    """Register `hook(reservation=...)`, called in the deleting transaction before the reservation's row goes."""
    if hook not in _deleting:
        _deleting.append(hook)


def reservation_claims_written(*, now: dt.datetime) -> None:
    """A reservations pass wrote the claims (the nodes and GPUs each reservation holds) as of `now`."""
    for hook in _claims_written:
        hook(now=now)


def reservation_deleting(*, reservation: Reservation) -> None:
    """`reservation` is about to be deleted, inside the caller's transaction."""
    for hook in _deleting:
        hook(reservation=reservation)
