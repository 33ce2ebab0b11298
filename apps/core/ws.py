"""Websocket authentication: `Authorization: Bearer <API key or OAuth token>`, or the browser's session cookie."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async

from .principal import Principal


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


@database_sync_to_async
def _principal_from_bearer(token: str) -> Principal | None:
    from apps.tenants.services import api_key_authenticate, principal_for_user

    if token.startswith("gry_"):
        result = api_key_authenticate(raw_key=token)
        return result[1] if result else None
    from oauth2_provider.models import get_access_token_model

    access = get_access_token_model().objects.select_related("user").filter(token_checksum__isnull=False)
    import hashlib

    found = access.filter(token_checksum=hashlib.sha256(token.encode()).hexdigest()).first()
    if found is None or found.is_expired() or found.user is None:
        return None
    granted = found.scope.split()
    if "read" not in granted and "write" not in granted:  # e.g. `openid` alone: identity, not data
        return None
    return principal_for_user(user=found.user, kind="oauth", read_only="write" not in granted)


@database_sync_to_async
def _principal_from_session(user: Any) -> Principal | None:
    from apps.tenants.services import principal_for_user

    if user is None or not user.is_authenticated:
        return None
    return principal_for_user(user=user, kind="session")


class _BearerMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        auth = _header(scope, b"authorization")
        principal = None
        if auth.lower().startswith("bearer "):
            principal = await _principal_from_bearer(auth[7:].strip())
        else:
            principal = await _principal_from_session(scope.get("user"))
        return await self.inner({**scope, "principal": principal}, receive, send)


def CredentialAuthMiddleware(inner: Any) -> Any:  # noqa: N802 - reads like the Channels middleware it wraps
    return AuthMiddlewareStack(_BearerMiddleware(inner))
