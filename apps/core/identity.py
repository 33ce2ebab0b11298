"""Who a credential is, and which tenants exist: what apps.core asks of the app that owns identities.

apps.core authenticates requests and websockets and scopes viewsets to tenants, but tenants, memberships and API
keys belong to apps.tenants, an app above core. That app registers its `IdentityProvider` in its
AppConfig.ready(); core reaches it through `provider()` and never imports it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from .principal import Principal, Refusal


class IdentityProvider(Protocol):
    """The credential checks and tenant lookups core needs (apps.tenants.services.identity implements it)."""

    def api_key_authenticate(self, *, raw_key: str) -> tuple[Any, Principal] | Refusal:
        """(user, principal) for a presented API key, or why it is refused (the same rules at every door)."""

    def api_key_next_expiry(self, *, key_pk: int) -> dt.datetime | None:
        """When the key, or the secret a rotation replaced, next stops authenticating by itself (None: never)."""

    def principal_for_user(self, *, user: Any, kind: str, read_only: bool = False) -> Principal:
        """The principal of a logged-in user (a session or an OAuth token)."""

    def tenant_get_visible(self, *, principal: Principal, slug: str) -> Any | None:
        """The tenant `slug` if `principal` may see it, else None."""

    def tenant_get_by_id(self, *, tenant_id: int) -> Any:
        """The tenant with this id."""

    def tenants_suspended(self, *, tenant_ids: Iterable[int]) -> frozenset[int]:
        """Those of `tenant_ids` that are suspended."""


_provider: IdentityProvider | None = None


def register(provider: IdentityProvider) -> None:
    """Install the identity provider (the tenants app's ready())."""
    global _provider
    _provider = provider


def provider() -> IdentityProvider:
    if _provider is None:
        raise ImproperlyConfigured("no identity provider is registered: apps.tenants must be in INSTALLED_APPS")
    return _provider
