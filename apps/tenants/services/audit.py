"""The audit record of a change to a tenant, a membership or an API key."""

from __future__ import annotations

from typing import Any

from apps.core.audit import audit_record
from apps.core.principal import Principal

from ..models import ApiKey, Membership, Tenant

_OBJECT_TYPES = {Tenant: "tenant", ApiKey: "api_key", Membership: "membership"}


def tenant_audit(actor: Principal, action: str, obj: Any, tenant: Tenant | None, before: Any, after: Any) -> None:
    """Record `action` on a tenant, membership or key (tenants by slug, keys by key id, memberships by pk)."""
    object_id = {Tenant: lambda o: o.slug, ApiKey: lambda o: o.key_id}.get(type(obj), lambda o: str(o.pk))(obj)
    audit_record(
        actor=actor,
        action=action,
        obj=obj,
        object_type=_OBJECT_TYPES[type(obj)],
        object_id=object_id,
        tenant_id=tenant.pk if tenant is not None else None,
        tenant_slug=tenant.slug if tenant is not None else "",
        before=before,
        after=after,
    )
