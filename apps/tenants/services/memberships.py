"""Memberships: a user's role in a tenant. Nobody grants a role above their own."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F

from apps.core import liveauth
from apps.core import scopes as S
from apps.core.audit import snapshot
from apps.core.periodic import nudge
from apps.core.principal import Principal
from apps.core.scoping import tenant_scope

from ..models import Membership, Tenant
from .audit import tenant_audit
from .tenants import RECONCILE


def _bump(tenant: Tenant) -> None:
    """Members become RoleBindings: the tenant's spec changed."""
    Tenant.objects.filter(pk=tenant.pk).update(generation=F("generation") + 1)
    nudge(RECONCILE)


def _check_rank(actor: Principal, tenant: Tenant, *roles: str) -> None:
    """Nobody grants, changes or removes a role above their own (tenant admins cannot touch owners).

    Platform staff and the system act above every role; a key with `admin` acts as an admin.
    """
    if actor.is_platform:
        return
    own = "viewer"
    if actor.user_id is not None:
        with tenant_scope(tenant):
            membership = Membership.objects.filter(user_id=actor.user_id).first()
        own = membership.role if membership else own
    if S.ADMIN in actor.scopes_in(tenant.pk) and S.ROLE_RANK[own] < S.ROLE_RANK["admin"]:
        own = "admin"
    for role in roles:
        if S.ROLE_RANK[role] > S.ROLE_RANK[own]:
            raise PermissionError(f"a {own} cannot grant or change the role {role!r}")


@transaction.atomic
def membership_add(
    *, actor: Principal, tenant: Tenant, user: Any, role: str, cluster_identity: str = "", source: str = ""
) -> Membership:
    """Give `user` a role in `tenant` (one membership per user and tenant); `source` "sso" marks single sign-on's."""
    if role not in S.ROLES:
        raise ValidationError({"role": f"must be one of {', '.join(S.ROLES)}"})
    _check_rank(actor, tenant, role)
    with tenant_scope(tenant):
        if Membership.objects.filter(user=user).exists():
            raise ValidationError({"user": f"{user} is already a member of {tenant.slug}"})
        membership = Membership.objects.create(
            tenant=tenant, user=user, role=role, cluster_identity=cluster_identity, source=source
        )
    tenant_audit(actor, "membership.create", membership, tenant, None, snapshot(membership, Membership.AUDIT_FIELDS))
    _bump(tenant)
    return membership


@transaction.atomic
def membership_update(*, actor: Principal, membership: Membership, **changes: Any) -> Membership:
    """Change a member's role or cluster identity; the user's open sockets check their access again."""
    if "role" in changes and changes["role"] not in S.ROLES:
        raise ValidationError({"role": f"must be one of {', '.join(S.ROLES)}"})
    _check_rank(actor, membership.tenant, membership.role, changes.get("role", membership.role))
    before = snapshot(membership, Membership.AUDIT_FIELDS)
    for name, value in changes.items():
        setattr(membership, name, value)
    after = snapshot(membership, Membership.AUDIT_FIELDS)
    if before == after:
        return membership
    membership.save()
    tenant_audit(actor, "membership.update", membership, membership.tenant, before, after)
    _bump(membership.tenant)
    liveauth.credentials_changed(liveauth.user_group(membership.user_id))
    return membership


@transaction.atomic
def membership_remove(*, actor: Principal, membership: Membership) -> None:
    """Remove a member from a tenant; the user's open sockets lose it."""
    _check_rank(actor, membership.tenant, membership.role)
    before = snapshot(membership, Membership.AUDIT_FIELDS)
    tenant = membership.tenant
    tenant_audit(actor, "membership.delete", membership, tenant, before, None)
    user_id = membership.user_id
    membership.delete()
    _bump(tenant)
    liveauth.credentials_changed(liveauth.user_group(user_id))  # the user's open sockets lose the tenant
