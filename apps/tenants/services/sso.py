"""Memberships from an OIDC provider's claim: single sign-on decides which tenants a user is in, and as what."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from apps.core import scopes as S
from apps.core.principal import system

from ..models import Membership, Tenant
from .memberships import membership_add, membership_remove, membership_update

logger = logging.getLogger(__name__)

SSO_SOURCE = "sso"
_ACTOR = system("sso")


def sso_roles_from_claim(values: Any) -> dict[str, str]:
    """The tenant slug -> role a claim names: `demo` is a member of demo, `demo:viewer` a viewer.

    A claim may be one string or a list. A value with an unknown role is ignored and logged (a typo must not grant
    anything); a tenant named twice gets the higher role.
    """
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, (list, tuple)):
        return {}
    roles: dict[str, str] = {}
    for value in values:
        if not isinstance(value, str) or not value.strip():
            continue
        slug, _, role = value.strip().partition(":")
        role = role or "member"
        if role not in S.ROLES:
            logger.warning("sso: ignoring claim value %r: unknown role %r (one of %s)", value, role, ", ".join(S.ROLES))
            continue
        if slug not in roles or S.ROLE_RANK[role] > S.ROLE_RANK[roles[slug]]:
            roles[slug] = role
    return roles


@transaction.atomic
def memberships_sync_from_claims(*, user: Any, values: Any) -> list[Membership]:
    """Make `user`'s memberships follow the provider's tenant claim, on every login; returns those the user holds.

    A tenant the claim names (and that exists, not archived) gets a membership with the claimed role, created
    with source "sso" or changed to that role. A membership the claim no longer names is removed only when SSO made
    it: one granted by hand stays. Each change is audited by the services, with the actor `system:sso`.
    """
    wanted = sso_roles_from_claim(values)
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=wanted, archived_at__isnull=True)}
    for slug in wanted.keys() - tenants.keys():
        logger.info("sso: %s names tenant %r, which does not exist (or is archived)", user, slug)
    # Archived tenants are left as they are: their memberships matter to nobody until an operator restores one.
    memberships = Membership.all_tenants.select_related("tenant").filter(user=user, tenant__archived_at__isnull=True)
    held = {m.tenant_id: m for m in memberships}
    for slug, tenant in tenants.items():
        membership = held.get(tenant.pk)
        if membership is None:
            held[tenant.pk] = membership_add(
                actor=_ACTOR, tenant=tenant, user=user, role=wanted[slug], source=SSO_SOURCE
            )
        elif membership.role != wanted[slug]:
            membership_update(actor=_ACTOR, membership=membership, role=wanted[slug])
    named = {tenant.pk for tenant in tenants.values()}
    for tenant_id, membership in list(held.items()):
        if tenant_id not in named and membership.source == SSO_SOURCE:
            membership_remove(actor=_ACTOR, membership=membership)
            del held[tenant_id]
    return list(held.values())
