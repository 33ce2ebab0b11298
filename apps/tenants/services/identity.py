"""The tenants app as apps.core's identity provider (apps.core.identity), registered in TenantsConfig.ready()."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from apps.core.principal import Principal, Refusal

from .. import selectors
from ..models import Tenant
from . import credentials


class TenantsIdentity:
    """Credentials checked by apps.tenants.services.credentials; tenants looked up by apps.tenants.selectors."""

    def api_key_authenticate(self, *, raw_key: str) -> tuple[Any, Principal] | Refusal:
        """(user, principal) for a presented API key, or why it is refused (credentials.api_key_verify)."""
        return credentials.api_key_authenticate(raw_key=raw_key)

    def api_key_next_expiry(self, *, key_pk: int) -> dt.datetime | None:
        """When the key next stops authenticating by itself (None: never)."""
        return selectors.api_key_next_expiry(key_pk=key_pk)

    def principal_for_user(self, *, user: Any, kind: str, read_only: bool = False) -> Principal:
        """The principal of a logged-in user."""
        return credentials.principal_for_user(user=user, kind=kind, read_only=read_only)

    def tenant_get_visible(self, *, principal: Principal, slug: str) -> Tenant | None:
        """The tenant `slug` if `principal` may see it."""
        return selectors.tenant_get_visible(principal=principal, slug=slug)

    def tenant_get_by_id(self, *, tenant_id: int) -> Tenant:
        """The tenant with this id."""
        return selectors.tenant_get_by_id(tenant_id=tenant_id)

    def tenants_suspended(self, *, tenant_ids: Iterable[int]) -> frozenset[int]:
        """Those of `tenant_ids` that are suspended."""
        return selectors.tenants_suspended(tenant_ids=tenant_ids)
