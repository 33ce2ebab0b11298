"""Fail-closed tenant scoping.

Tenant-owned models use `TenantScopedManager` as `objects`: a query made outside a `tenant_scope(...)` raises
`TenantScopeMissing` instead of returning every tenant's rows. Requests enter the scope of their credential
(`TenantScopedViewSet`), tasks and reconcilers enter it explicitly, and platform-wide code says so with
`tenant_scope(ALL_TENANTS)` or uses the visible `all_tenants` manager.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import models


class _AllTenants:
    def __repr__(self) -> str:
        return "ALL_TENANTS"


ALL_TENANTS = _AllTenants()
Scope = frozenset[int] | _AllTenants

_current: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("gryvia_tenant_scope", default=None)


class TenantScopeMissing(RuntimeError):
    """A tenant-owned model was queried with no tenant scope in effect."""


def _as_scope(tenants: Any) -> Scope:
    if tenants is ALL_TENANTS:
        return ALL_TENANTS
    if isinstance(tenants, int):
        return frozenset({tenants})
    if hasattr(tenants, "pk"):
        return frozenset({tenants.pk})
    ids: set[int] = set()
    for item in tenants:
        ids.add(item if isinstance(item, int) else item.pk)
    return frozenset(ids)


def current_scope() -> Scope | None:
    return _current.get()


def set_scope(tenants: Any) -> contextvars.Token:
    return _current.set(_as_scope(tenants))


def reset_scope(token: contextvars.Token) -> None:
    _current.reset(token)


@contextmanager
def tenant_scope(tenants: int | Any | Iterable[int] | _AllTenants) -> Iterator[Scope]:
    """Run a block with the given tenant(s) in scope: an id, a Tenant, an iterable of either, or ALL_TENANTS."""
    token = set_scope(tenants)
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def filter_to_scope(qs: models.QuerySet, scope: Scope | None = None) -> models.QuerySet:
    scope = current_scope() if scope is None else scope
    if scope is None:
        raise TenantScopeMissing(
            f"{qs.model.__name__} queried outside a tenant scope; wrap the call in tenant_scope(...)"
        )
    if scope is ALL_TENANTS:
        return qs
    return qs.filter(tenant_id__in=scope)


class TenantScopedManager(models.Manager):
    """The default `objects` of tenant-owned models: filtered to the current scope, raising without one."""

    def get_queryset(self) -> models.QuerySet:
        return filter_to_scope(super().get_queryset())
