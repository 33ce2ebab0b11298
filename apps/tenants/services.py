"""Tenants, memberships and API keys: every change goes through these functions (audited, transactional)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from apps.core import liveauth
from apps.core import scopes as S
from apps.core.audit import audit_record, snapshot
from apps.core.errors import Conflict
from apps.core.periodic import nudge
from apps.core.principal import Principal

from . import keys
from .models import ApiKey, Membership, Tenant
from .models.tenant import TenantPhase
from .selectors import memberships_of_user

LAST_USED_RESOLUTION = dt.timedelta(seconds=60)
TENANT_SPEC_FIELDS = (
    "display_name",
    "labels",
    "suspended",
    "max_gpus",
    "gpu_type_ceilings",
    "max_cpu",
    "max_memory",
    "tokens_per_day",
)
RECONCILE = "reconcile-tenants"
KEY_UPDATE_FIELDS = (
    "name",
    "expires_at",
    "allowed_models",
    "requests_per_minute",
    "tokens_per_minute",
    "tokens_per_day",
)


def _audit(actor: Principal, action: str, obj: Any, tenant: Tenant | None, before: Any, after: Any) -> None:
    object_id = {Tenant: lambda o: o.slug, ApiKey: lambda o: o.key_id}.get(type(obj), lambda o: str(o.pk))(obj)
    audit_record(
        actor=actor,
        action=action,
        obj=obj,
        object_type={Tenant: "tenant", ApiKey: "api_key", Membership: "membership"}[type(obj)],
        object_id=object_id,
        tenant_id=tenant.pk if tenant is not None else None,
        tenant_slug=tenant.slug if tenant is not None else "",
        before=before,
        after=after,
    )


def _routes_changed() -> None:
    """After commit, the LLM gateway drops its cached keys and limits (a local import: apps.llm imports tenants)."""
    from apps.llm import routing

    transaction.on_commit(routing.routes_changed)


# --- tenants ---------------------------------------------------------------------------------------------------


@transaction.atomic
def tenant_create(*, actor: Principal, slug: str, **spec: Any) -> Tenant:
    """Create a tenant; its namespace, quota and policies follow through the tenant reconciler.

    Raises:
        ValidationError: a bad field (named), or the slug is taken.
    """
    unknown = sorted(set(spec) - set(TENANT_SPEC_FIELDS))
    if unknown:
        raise ValidationError({name: "unknown field" for name in unknown})
    tenant = Tenant(slug=slug, **spec)
    tenant.full_clean()
    try:
        with transaction.atomic():
            tenant.save()
    except IntegrityError as exc:
        raise ValidationError({"slug": f"tenant {slug!r} already exists"}) from exc
    _audit(actor, "tenant.create", tenant, tenant, None, snapshot(tenant, Tenant.AUDIT_FIELDS))
    nudge(RECONCILE)
    return tenant


@transaction.atomic
def tenant_update(*, actor: Principal, tenant: Tenant, **changes: Any) -> Tenant:
    """Change spec fields; bumps `generation` so the reconciler re-applies."""
    unknown = sorted(set(changes) - set(TENANT_SPEC_FIELDS))
    if unknown:
        raise ValidationError({name: "unknown field" for name in unknown})
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = snapshot(tenant, Tenant.AUDIT_FIELDS)
    for name, value in changes.items():
        setattr(tenant, name, value)
    tenant.full_clean()
    after = snapshot(tenant, Tenant.AUDIT_FIELDS)
    if after == before:
        return tenant
    tenant.generation = F("generation") + 1
    tenant.save()
    tenant.refresh_from_db()
    _audit(actor, "tenant.update", tenant, tenant, before, after)
    nudge(RECONCILE)
    if any(before[f] != after[f] for f in ("suspended", "tokens_per_day")):
        _routes_changed()
    if after["suspended"] and not before["suspended"]:
        liveauth.credentials_changed(liveauth.tenant_group(tenant.pk))  # its open sockets stop (apps.core.liveauth)
    return tenant


@transaction.atomic
def tenant_archive(*, actor: Principal, tenant: Tenant) -> Tenant:
    """Archive a tenant: its keys stop working, its cluster objects are removed, its rows and history stay.

    Tenants are never hard-deleted: usage, invoices and the audit log keep pointing at them.
    """
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    if tenant.is_archived:
        return tenant
    before = snapshot(tenant, Tenant.AUDIT_FIELDS)
    now = timezone.now()
    tenant.archived_at = now
    tenant.suspended = True
    tenant.generation = F("generation") + 1
    tenant.save()
    tenant.refresh_from_db()
    ApiKey.all_tenants.filter(tenant=tenant, revoked_at__isnull=True).update(revoked_at=now)
    _audit(actor, "tenant.archive", tenant, tenant, before, snapshot(tenant, Tenant.AUDIT_FIELDS))
    nudge(RECONCILE)
    _routes_changed()
    liveauth.credentials_changed(liveauth.tenant_group(tenant.pk))
    return tenant


def tenant_set_status(*, tenant_id: int, generation: int, phase: str, message: str, applied: dict[str, str]) -> bool:
    """Compare-and-swap status write by the reconciler: applies only if the spec did not change meanwhile."""
    return bool(
        Tenant.objects.filter(pk=tenant_id, generation=generation).update(
            observed_generation=generation,
            status_phase=phase,
            status_message=message[:2000],
            status_applied=applied,
            status_reconciled_at=timezone.now(),
        )
    )


def tenant_record_reconcile_error(*, tenant: Tenant, message: str) -> None:
    """Put a cluster error in the tenant's status, and in the audit log when it is a new error."""
    with transaction.atomic():
        changed = Tenant.objects.filter(pk=tenant.pk).exclude(status_message=message[:2000], status_phase="Error")
        if changed.update(
            status_phase=TenantPhase.ERROR, status_message=message[:2000], status_reconciled_at=timezone.now()
        ):
            from apps.core.principal import system

            audit_record(
                actor=system("tenant-reconciler"),
                action="tenant.reconcile_error",
                obj=tenant,
                object_type="tenant",
                object_id=tenant.slug,
                tenant_id=tenant.pk,
                tenant_slug=tenant.slug,
                before=None,
                after={"status_phase": "Error", "status_message": message[:2000]},
            )


# --- memberships -----------------------------------------------------------------------------------------------


def _bump(tenant: Tenant) -> None:
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
        membership = Membership.all_tenants.filter(tenant=tenant, user_id=actor.user_id).first()
        own = membership.role if membership else own
    if S.ADMIN in actor.scopes_in(tenant.pk) and S.ROLE_RANK[own] < S.ROLE_RANK["admin"]:
        own = "admin"
    for role in roles:
        if S.ROLE_RANK[role] > S.ROLE_RANK[own]:
            raise PermissionError(f"a {own} cannot grant or change the role {role!r}")


@transaction.atomic
def membership_add(*, actor: Principal, tenant: Tenant, user: Any, role: str, cluster_identity: str = "") -> Membership:
    """Give `user` a role in `tenant` (one membership per user and tenant)."""
    if role not in S.ROLES:
        raise ValidationError({"role": f"must be one of {', '.join(S.ROLES)}"})
    _check_rank(actor, tenant, role)
    if Membership.all_tenants.filter(tenant=tenant, user=user).exists():
        raise ValidationError({"user": f"{user} is already a member of {tenant.slug}"})
    membership = Membership.all_tenants.create(tenant=tenant, user=user, role=role, cluster_identity=cluster_identity)
    _audit(actor, "membership.create", membership, tenant, None, snapshot(membership, Membership.AUDIT_FIELDS))
    _bump(tenant)
    return membership


@transaction.atomic
def membership_update(*, actor: Principal, membership: Membership, **changes: Any) -> Membership:
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
    _audit(actor, "membership.update", membership, membership.tenant, before, after)
    _bump(membership.tenant)
    liveauth.credentials_changed(liveauth.user_group(membership.user_id))
    return membership


@transaction.atomic
def membership_remove(*, actor: Principal, membership: Membership) -> None:
    _check_rank(actor, membership.tenant, membership.role)
    before = snapshot(membership, Membership.AUDIT_FIELDS)
    tenant = membership.tenant
    _audit(actor, "membership.delete", membership, tenant, before, None)
    user_id = membership.user_id
    membership.delete()
    _bump(tenant)
    liveauth.credentials_changed(liveauth.user_group(user_id))  # the user's open sockets lose the tenant


# --- API keys --------------------------------------------------------------------------------------------------


def _check_grant(actor: Principal, tenant: Tenant, requested: list[str], is_platform: bool) -> None:
    bad = S.unknown(requested)
    if bad:
        raise ValidationError({"scopes": f"unknown scopes: {', '.join(bad)}; valid: {', '.join(sorted(S.ALL_SCOPES))}"})
    if not requested:
        raise ValidationError({"scopes": "at least one scope is required"})
    if is_platform and not actor.is_platform:
        raise PermissionError("only platform staff can create platform keys")
    held = actor.platform_scopes if is_platform else actor.scopes_in(tenant.pk)
    missing = sorted(S.expand(requested) - held)
    if missing:
        raise PermissionError(f"a key cannot grant scopes its creator lacks: {', '.join(missing)}")


@transaction.atomic
def api_key_create(
    *,
    actor: Principal,
    tenant: Tenant,
    scopes: list[str],
    name: str = "",
    is_platform: bool = False,
    expires_at: dt.datetime | None = None,
    user: Any = None,
    allowed_models: list[str] | None = None,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    tokens_per_day: int | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its plaintext, which is never stored and cannot be shown again.

    LLM gateway limits: `allowed_models` (model names; empty: every model the tenant may use) and per-key
    requests and tokens per minute and tokens per day (None: no limit beyond the tenant's).

    Raises:
        ValidationError: unknown scopes, a bad expiry or a bad limit.
        PermissionError: the actor lacks a scope it tries to grant, or a platform key by non-staff.
    """
    from apps.llm.services import validate_key_limits

    _check_grant(actor, tenant, scopes, is_platform)
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "must be in the future"})
    limits = validate_key_limits(
        {
            "allowed_models": allowed_models,
            "requests_per_minute": requests_per_minute,
            "tokens_per_minute": tokens_per_minute,
            "tokens_per_day": tokens_per_day,
        }
    )
    secret = keys.new_secret()
    key = ApiKey.all_tenants.create(
        tenant=tenant,
        key_id=keys.new_key_id(),
        name=name,
        secret_digest=keys.digest(secret),
        scopes=sorted(set(scopes)),
        is_platform=is_platform,
        expires_at=expires_at,
        created_by=actor.label,
        user=user,
        **limits,
    )
    _audit(actor, "api_key.create", key, tenant, None, snapshot(key, ApiKey.AUDIT_FIELDS))
    _routes_changed()  # the gateway may remember the id as unknown
    return key, keys.format_key(key.key_id, secret)


@transaction.atomic
def api_key_update(*, actor: Principal, key: ApiKey, **changes: Any) -> ApiKey:
    """Rename a key, change its expiry or its LLM gateway limits. Scopes never change: create a new key instead."""
    from apps.llm.services import KEY_LIMIT_FIELDS, validate_key_limits

    unknown = sorted(set(changes) - set(KEY_UPDATE_FIELDS))
    if unknown:
        raise ValidationError({name: "cannot be changed; create a new key" for name in unknown})
    if changes.get("expires_at") is not None and changes["expires_at"] <= timezone.now():
        raise ValidationError({"expires_at": "must be in the future"})
    changes.update(validate_key_limits({f: changes[f] for f in KEY_LIMIT_FIELDS if f in changes}))
    before = snapshot(key, ApiKey.AUDIT_FIELDS)
    for name, value in changes.items():
        setattr(key, name, value)
    after = snapshot(key, ApiKey.AUDIT_FIELDS)
    if before != after:
        key.save()
        _audit(actor, "api_key.update", key, key.tenant, before, after)
        _routes_changed()
        if before["expires_at"] != after["expires_at"]:
            liveauth.credentials_changed(liveauth.key_group(key.pk))  # open sockets move their expiry timer
    return key


@transaction.atomic
def api_key_revoke(*, actor: Principal, key: ApiKey, allow_self: bool = False) -> ApiKey:
    """Revoke a key for good (the row stays for the audit trail); revoking a revoked key changes nothing.

    Raises:
        Conflict: the actor is this very key and did not say `allow_self`: the client would lock itself out (as
            the demo key `make run` prints would, leaving a dead key in demo-credentials.json).
    """
    if key.revoked_at is not None:
        return key
    if actor.api_key_pk == key.pk and not allow_self:
        raise Conflict(
            f"key {key.key_id} is the credential making this request: revoking it would lock this client out. "
            "Revoke it with another credential, or add ?self=true to revoke it anyway"
        )
    before = snapshot(key, ApiKey.AUDIT_FIELDS)
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at", "updated_at"])
    _audit(actor, "api_key.revoke", key, key.tenant, before, snapshot(key, ApiKey.AUDIT_FIELDS))
    _routes_changed()
    liveauth.credentials_changed(liveauth.key_group(key.pk))  # its open sockets close (apps.core.liveauth)
    return key


@transaction.atomic
def api_key_rotate(*, actor: Principal, key: ApiKey, grace_seconds: int = 3600) -> tuple[ApiKey, str]:
    """Give the key a new secret; the old one keeps working for `grace_seconds` (0: stops at once)."""
    if key.state != "active":
        raise ValidationError({"key": f"a {key.state} key cannot be rotated"})
    if grace_seconds < 0 or grace_seconds > 30 * 86400:
        raise ValidationError({"grace_seconds": "must be between 0 and 2592000 (30 days)"})
    before = snapshot(key, ApiKey.AUDIT_FIELDS)
    secret = keys.new_secret()
    key.previous_secret_digest = key.secret_digest if grace_seconds else ""
    key.previous_valid_until = timezone.now() + dt.timedelta(seconds=grace_seconds) if grace_seconds else None
    key.secret_digest = keys.digest(secret)
    key.save()
    _audit(actor, "api_key.rotate", key, key.tenant, before, snapshot(key, ApiKey.AUDIT_FIELDS))
    _routes_changed()
    liveauth.credentials_changed(liveauth.key_group(key.pk))  # sockets on the old secret: closed, or timed to its grace
    return key, keys.format_key(key.key_id, secret)


def api_key_authenticate(*, raw_key: str) -> tuple[Any, Principal] | None:
    """Check a presented key; returns (user, principal) or None when it is malformed, unknown, revoked or expired."""
    parsed = keys.parse_key(raw_key)
    if parsed is None:
        return None
    key_id, secret = parsed
    key = ApiKey.all_tenants.select_related("tenant", "user").filter(key_id=key_id).first()
    if key is None or key.state != "active" or key.tenant.is_archived:
        return None
    now = timezone.now()
    current = keys.digest_matches(secret, key.secret_digest)
    previous = (
        not current
        and key.previous_valid_until is not None
        and key.previous_valid_until > now
        and keys.digest_matches(secret, key.previous_secret_digest)
    )
    if not (current or previous):
        return None
    if key.last_used_at is None or key.last_used_at < now - LAST_USED_RESOLUTION:
        # At most one write a minute per key, and never a lost race that moves the time backwards.
        ApiKey.all_tenants.filter(pk=key.pk).exclude(last_used_at__gte=now - LAST_USED_RESOLUTION).update(
            last_used_at=now
        )
    granted = S.expand(key.scopes)
    principal = Principal(
        label=f"key:{key.key_id}",
        kind="api_key",
        user_id=key.user_id,
        api_key_pk=key.pk,
        tenant_scopes={} if key.is_platform else {key.tenant_id: granted},
        is_platform=key.is_platform,
        platform_scopes=granted if key.is_platform else frozenset(),
        bound_to=key.bound_to,
    )
    return (key.user or AnonymousUser()), principal


def principal_for_user(*, user: Any, kind: str, read_only: bool = False) -> Principal:
    """The principal of a logged-in user: the scopes of their role in each tenant; staff act on every tenant."""
    tenant_scopes: dict[int, frozenset[str]] = {}
    for membership in memberships_of_user(user_id=user.pk):
        granted = S.expand(S.ROLE_SCOPES[membership.role])
        tenant_scopes[membership.tenant_id] = S.read_only(granted) if read_only else granted
    platform_scopes = frozenset()
    if user.is_staff:
        platform_scopes = S.read_only(S.ALL_SCOPES) if read_only else S.ALL_SCOPES
    return Principal(
        label=f"user:{user.get_username()}",
        kind=kind,
        user_id=user.pk,
        tenant_scopes=tenant_scopes,
        is_platform=user.is_staff,
        platform_scopes=platform_scopes,
    )


def admin_principal(request: Any) -> Principal:
    """The principal of a Django admin request: its staff user acting through their session."""
    return principal_for_user(user=request.user, kind="session")
