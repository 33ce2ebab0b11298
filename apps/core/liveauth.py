"""Live connections end with their credential.

A websocket keeps what opened it (`LiveCredential`: the bearer token, or the browser session) and checks it again,
through the same identity provider REST uses (apps.core.identity; an API key by the same rules as at every door),
whenever it may have died: on every subscribe, at the credential's next expiry
(a timer in the consumer), and when a notice arrives on one of the credential's groups. The services that revoke,
rotate or re-date a key, suspend or archive a tenant, and change or remove a membership send that notice after
commit (`credentials_changed`); so does the deletion of an OAuth access token (revoked through /o/revoke_token/,
replaced by a refresh, deleted in the admin), through a post_delete receiver, the one hook django-oauth-toolkit
offers. A credential refused closes the socket with 4000 + the status REST would answer, and the same message:
4401 when it no longer authenticates, 4403 when it may not act now (an API key of a suspended tenant)
(apps.core.consumers).

Groups: `auth.key.<pk>`, `auth.oauth.<pk>`, `auth.user.<user id>`, and `t<tenant id>.auth` per tenant the principal
acts in. Live events are not served in a suspended tenant, except to platform staff: an API key of that tenant is
refused outright, a user's session or OAuth token loses that tenant only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
from dataclasses import dataclass
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import transaction

from . import events
from .identity import provider
from .principal import Principal, Refusal

logger = logging.getLogger(__name__)
CHANGED = "gryvia.credentials"  # the message type: the consumer's `gryvia_credentials` handler


@dataclass(frozen=True)
class LiveCredential:
    """What opened a websocket, kept to check it again: a bearer token (`api_key` or `oauth`), or a session."""

    kind: str  # "api_key", "oauth" or "session"
    token: str = ""
    session_key: str = ""

    def __repr__(self) -> str:  # never the token itself (tracebacks, logs)
        return f"LiveCredential({self.kind})"


@dataclass(frozen=True)
class LiveAuth:
    """A credential that authenticated just now: who it is, when it next may stop by itself, and the groups on
    which a change to it is announced."""

    principal: Principal
    expires_at: dt.datetime | None
    groups: frozenset[str]


def key_group(key_pk: int) -> str:
    return f"auth.key.{key_pk}"


def token_group(token_pk: int) -> str:
    return f"auth.oauth.{token_pk}"


def user_group(user_id: int) -> str:
    return f"auth.user.{user_id}"


def tenant_group(tenant_id: int) -> str:
    return f"{events.tenant_group(tenant_id)}.auth"


def credential_from_bearer(token: str) -> LiveCredential:
    return LiveCredential(kind="api_key" if token.startswith("gry_") else "oauth", token=token)


NOT_AUTHENTICATED = Refusal(401, "not_authenticated", "no valid credential")


def authenticate(credential: LiveCredential) -> LiveAuth | Refusal:
    """Check `credential` now (database access: call it from sync code), or say why it is refused."""
    if credential.kind == "api_key":
        found = _api_key(credential.token)
    elif credential.kind == "oauth":
        found = _oauth(credential.token)
    else:
        found = _session(credential.session_key)
    if found is None:
        return NOT_AUTHENTICATED
    if isinstance(found, Refusal):
        return found
    principal, expires_at, groups = found
    principal = _without_suspended(principal)
    groups |= {tenant_group(tenant_id) for tenant_id in principal.tenant_scopes}
    return LiveAuth(principal=principal, expires_at=expires_at, groups=frozenset(groups))


def _api_key(token: str) -> tuple[Principal, dt.datetime | None, set[str]] | Refusal:
    result = provider().api_key_authenticate(raw_key=token)
    if isinstance(result, Refusal):
        return result
    principal = result[1]
    expires_at = provider().api_key_next_expiry(key_pk=principal.api_key_pk)
    return principal, expires_at, {key_group(principal.api_key_pk)}


def _oauth(token: str) -> tuple[Principal, dt.datetime | None, set[str]] | None:
    from oauth2_provider.models import get_access_token_model

    checksum = hashlib.sha256(token.encode()).hexdigest()  # how the toolkit finds a token, stored hashed or not
    found = get_access_token_model().objects.select_related("user").filter(token_checksum=checksum).first()
    if found is None or found.is_expired() or found.user is None or not found.user.is_active:
        return None
    granted = found.scope.split()
    if "read" not in granted and "write" not in granted:  # e.g. `openid` alone: identity, not data
        return None
    principal = provider().principal_for_user(user=found.user, kind="oauth", read_only="write" not in granted)
    return principal, found.expires, {token_group(found.pk), user_group(found.user.pk)}


def _session(session_key: str) -> tuple[Principal, dt.datetime | None, set[str]] | None:
    from django.contrib.auth import get_user

    if not session_key:
        return None
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    # Django's own check, as on every HTTP request: the session exists and is unexpired, its user is active and
    # their password unchanged since login.
    user = get_user(SimpleNamespace(session=session))
    if not user.is_authenticated:
        return None
    principal = provider().principal_for_user(user=user, kind="session")
    return principal, session.get_expiry_date(), {user_group(user.pk)}


def _without_suspended(principal: Principal) -> Principal:
    if principal.is_platform or not principal.tenant_scopes:
        return principal
    suspended = provider().tenants_suspended(tenant_ids=principal.tenant_scopes)
    if not suspended:
        return principal
    kept = {tenant_id: held for tenant_id, held in principal.tenant_scopes.items() if tenant_id not in suspended}
    return dataclasses.replace(principal, tenant_scopes=kept)


def credentials_changed(*groups: str) -> None:
    """After the current transaction commits (at once outside one), tell the sockets in `groups` to check their
    credential again. A live view must never break the write that caused it: failures are logged, not raised."""
    if groups:
        transaction.on_commit(lambda: _notify(groups))


def _notify(groups: tuple[str, ...]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):  # its groups are every listener there is
        groups = tuple(group for group in groups if layer.groups.get(group))
        if not groups:
            return

    async def send_all() -> None:
        for group in groups:
            try:
                await layer.group_send(group, {"type": CHANGED})
            except Exception:
                logger.exception("could not tell %s to check its credential", group)

    events.on_layer_loop(send_all, what="credential change not announced")


def on_access_token_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """post_delete of the OAuth access token model (connected in apps.core.apps)."""
    credentials_changed(token_group(instance.pk))
