"""Checking a credential: one pure function decides whether an API key authenticates, for every door.

`api_key_verify` takes the presented key, the stored record of its key id and the time, and returns the caller's
`Principal` or a `Refusal` (status, code, message). REST (`api_key_authenticate`, through apps.core's
authentication classes), the LLM gateway (behind its cache of records), websockets (apps.core.liveauth, on connect
and on every re-check) and so the CLI's login (a REST call) all decide with it, so a rule holds identically at each.
"""

from __future__ import annotations

import datetime as dt
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from apps.core import scopes as S
from apps.core.principal import Principal, Refusal

from .. import keys
from ..models import ApiKey
from ..selectors import memberships_of_user

LAST_USED_RESOLUTION = dt.timedelta(seconds=60)
# What KeyRecord.from_key reads, as `.select_related("tenant").only(*KEY_RECORD_FIELDS)` names it (the primary key
# comes with every row).
KEY_RECORD_FIELDS = (
    "key_id",
    "secret_digest",
    "previous_secret_digest",
    "previous_valid_until",
    "expires_at",
    "revoked_at",
    "scopes",
    "is_platform",
    "bound_to",
    "user",
    "tenant",
    "tenant__slug",
    "tenant__suspended",
    "tenant__archived_at",
)
INVALID = Refusal(401, "invalid_api_key", "invalid API key")


@dataclass(frozen=True)
class KeyRecord:
    """The stored facts that decide whether a key authenticates: its digests, dates, scopes and its tenant's state."""

    pk: int
    key_id: str
    secret_digest: str
    previous_secret_digest: str
    previous_valid_until: dt.datetime | None
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    scopes: frozenset[str]  # expanded (apps.core.scopes.expand)
    is_platform: bool
    bound_to: str
    user_id: int | None
    tenant_id: int
    tenant_slug: str
    tenant_suspended: bool
    tenant_archived: bool

    @classmethod
    def from_key(cls, key: ApiKey) -> KeyRecord:
        """The record of a key loaded with its tenant (`KEY_RECORD_FIELDS`)."""
        return cls(
            pk=key.pk,
            key_id=key.key_id,
            secret_digest=key.secret_digest,
            previous_secret_digest=key.previous_secret_digest,
            previous_valid_until=key.previous_valid_until,
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
            scopes=S.expand(key.scopes),
            is_platform=key.is_platform,
            bound_to=key.bound_to,
            user_id=key.user_id,
            tenant_id=key.tenant_id,
            tenant_slug=key.tenant.slug,
            tenant_suspended=key.tenant.suspended,
            tenant_archived=key.tenant.archived_at is not None,
        )


def _same(presented_digest: str, stored: str) -> bool:
    return bool(stored) and hmac.compare_digest(presented_digest, stored)


def api_key_verify(
    *, presented: str, record: KeyRecord | None, now: dt.datetime, required_scopes: Iterable[str] = ()
) -> Principal | Refusal:
    """Decide whether `presented` (`gry_<key_id>_<secret>`) authenticates as `record`, the stored record of its key
    id (None: no such key). Pure: no I/O. Rules, in order:

    - a malformed key, an unknown key id or a wrong secret: 401 `invalid_api_key` (nothing said about the key);
    - the secret a rotation replaced, past its grace period: 401 `key_rotated` (within it, it still works);
    - its tenant archived: 401 `tenant_archived`; a revoked key: 401 `key_revoked`; an expired one: `key_expired`;
    - its tenant suspended: 403 `tenant_suspended` (reads included, at every door; platform keys too);
    - a scope in `required_scopes` the key does not hold: 403 `insufficient_scope`.

    Only a caller who holds a secret of the key learns more than `invalid_api_key`.
    """
    parsed = keys.parse_key(presented)
    if parsed is None or record is None or parsed[0] != record.key_id:
        return INVALID
    presented_digest = keys.digest(parsed[1])
    if not _same(presented_digest, record.secret_digest):
        if not _same(presented_digest, record.previous_secret_digest):
            return INVALID
        until = record.previous_valid_until
        if until is None or until <= now:
            ended = f" at {until.isoformat(timespec='seconds')}" if until is not None else ""
            return Refusal(
                401,
                "key_rotated",
                f"API key {record.key_id} was rotated: this secret's grace period ended{ended}",
            )
    if record.tenant_archived:  # before revoked: archiving revokes every key, and this says why
        return Refusal(401, "tenant_archived", f"tenant {record.tenant_slug!r} is archived: its keys no longer work")
    if record.revoked_at is not None:
        return Refusal(401, "key_revoked", f"API key {record.key_id} was revoked")
    if record.expires_at is not None and record.expires_at <= now:
        expired = record.expires_at.isoformat(timespec="seconds")
        return Refusal(401, "key_expired", f"API key {record.key_id} expired at {expired}")
    if record.tenant_suspended:
        return Refusal(
            403,
            "tenant_suspended",
            f"tenant {record.tenant_slug!r} is suspended: its API keys are refused until it is resumed",
        )
    missing = sorted(set(required_scopes) - record.scopes)
    if missing:
        return Refusal(403, "insufficient_scope", f"this key lacks the scope {', '.join(missing)}")
    return Principal(
        label=f"key:{record.key_id}",
        kind="api_key",
        user_id=record.user_id,
        api_key_pk=record.pk,
        tenant_scopes={} if record.is_platform else {record.tenant_id: record.scopes},
        is_platform=record.is_platform,
        platform_scopes=record.scopes if record.is_platform else frozenset(),
        bound_to=record.bound_to,
    )


def api_key_authenticate(*, raw_key: str) -> tuple[Any, Principal] | Refusal:
    """Check a presented key now (REST, websockets): (user, principal), or why it is refused (`api_key_verify`).
    Records when the key was last used, at most once a minute."""
    parsed = keys.parse_key(raw_key)
    if parsed is None:
        return INVALID
    key = ApiKey.all_tenants.select_related("tenant", "user").filter(key_id=parsed[0]).first()
    now = timezone.now()
    verdict = api_key_verify(presented=raw_key, record=KeyRecord.from_key(key) if key else None, now=now)
    if isinstance(verdict, Refusal):
        return verdict
    if key.last_used_at is None or key.last_used_at < now - LAST_USED_RESOLUTION:
        # At most one write a minute per key, and never a lost race that moves the time backwards.
        ApiKey.all_tenants.filter(pk=key.pk).exclude(last_used_at__gte=now - LAST_USED_RESOLUTION).update(
            last_used_at=now
        )
    return (key.user or AnonymousUser()), verdict


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
