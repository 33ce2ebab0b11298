"""Who is calling: the credential of a request or task, with the tenants and scopes it grants."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import scopes as S
from .scoping import ALL_TENANTS, Scope


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    `tenant_scopes` maps each tenant the caller can act in to the expanded scopes it holds there. Platform
    principals (`is_platform`) hold `platform_scopes` in every tenant.
    """

    label: str
    kind: str  # "api_key", "oauth", "session" or "system"
    user_id: int | None = None
    api_key_pk: int | None = None
    tenant_scopes: dict[int, frozenset[str]] = field(default_factory=dict)
    is_platform: bool = False
    platform_scopes: frozenset[str] = frozenset()
    bound_to: str = ""  # a credential bound to one object (e.g. "job:<uid>") may act on that object only

    def scopes_in(self, tenant_id: int | None) -> frozenset[str]:
        if self.is_platform:
            return self.platform_scopes
        if tenant_id is None:
            return frozenset()
        return self.tenant_scopes.get(tenant_id, frozenset())

    def has_scope(self, scope: str | None, tenant_id: int | None) -> bool:
        held = self.scopes_in(tenant_id)
        if scope is None:  # any access to the tenant
            return self.is_platform or tenant_id in self.tenant_scopes
        return scope in held

    def tenants_with(self, scope: str | None) -> Scope:
        """The tenants in which this principal holds `scope` (None: any access)."""
        if self.is_platform:
            return ALL_TENANTS if (scope is None or scope in self.platform_scopes) else frozenset()
        return frozenset(t for t in self.tenant_scopes if self.has_scope(scope, t))

    @property
    def is_authenticated(self) -> bool:
        return True


@dataclass(frozen=True)
class Refusal:
    """Why a credential was refused: the same status, code and message at every door (REST, the LLM gateway,
    websockets). 401: it is not a valid credential (anymore); 403: it is, but it may not act now."""

    status: int
    code: str  # "invalid_api_key", "key_revoked", "key_expired", "key_rotated", "tenant_archived", ...
    message: str


SYSTEM = Principal(label="system", kind="system", is_platform=True, platform_scopes=S.ALL_SCOPES)


def system(component: str) -> Principal:
    return Principal(label=f"system:{component}", kind="system", is_platform=True, platform_scopes=S.ALL_SCOPES)
