"""User-managed API keys: create, change, revoke, rotate. Checking a presented key: .credentials."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.core import liveauth
from apps.core import scopes as S
from apps.core.audit import snapshot
from apps.core.errors import Conflict
from apps.core.principal import Principal
from apps.core.scoping import tenant_scope

from .. import keys
from ..models import ApiKey, Tenant
from .audit import tenant_audit
from .hooks import KEY_LIMIT_FIELDS, access_changed, key_limits_clean

KEY_UPDATE_FIELDS = ("name", "expires_at", *KEY_LIMIT_FIELDS)


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
    _check_grant(actor, tenant, scopes, is_platform)
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "must be in the future"})
    limits = key_limits_clean(
        {
            "allowed_models": allowed_models,
            "requests_per_minute": requests_per_minute,
            "tokens_per_minute": tokens_per_minute,
            "tokens_per_day": tokens_per_day,
        }
    )
    secret = keys.new_secret()
    with tenant_scope(tenant):
        key = ApiKey.objects.create(
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
    tenant_audit(actor, "api_key.create", key, tenant, None, snapshot(key, ApiKey.AUDIT_FIELDS))
    access_changed()  # the gateway may remember the id as unknown
    return key, keys.format_key(key.key_id, secret)


@transaction.atomic
def api_key_update(*, actor: Principal, key: ApiKey, **changes: Any) -> ApiKey:
    """Rename a key, change its expiry or its LLM gateway limits. Scopes never change: create a new key instead."""
    unknown = sorted(set(changes) - set(KEY_UPDATE_FIELDS))
    if unknown:
        raise ValidationError({name: "cannot be changed; create a new key" for name in unknown})
    if changes.get("expires_at") is not None and changes["expires_at"] <= timezone.now():
        raise ValidationError({"expires_at": "must be in the future"})
    changes.update(key_limits_clean({f: changes[f] for f in KEY_LIMIT_FIELDS if f in changes}))
    before = snapshot(key, ApiKey.AUDIT_FIELDS)
    for name, value in changes.items():
        setattr(key, name, value)
    after = snapshot(key, ApiKey.AUDIT_FIELDS)
    if before != after:
        key.save()
        tenant_audit(actor, "api_key.update", key, key.tenant, before, after)
        access_changed()
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
    tenant_audit(actor, "api_key.revoke", key, key.tenant, before, snapshot(key, ApiKey.AUDIT_FIELDS))
    access_changed()
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
    tenant_audit(actor, "api_key.rotate", key, key.tenant, before, snapshot(key, ApiKey.AUDIT_FIELDS))
    access_changed()
    liveauth.credentials_changed(liveauth.key_group(key.pk))  # sockets on the old secret: closed, or timed to its grace
    return key, keys.format_key(key.key_id, secret)
