"""What the session user may do in the dashboard's tenant: decided from the principal's scopes there, as the REST
API decides it (a role name never appears in a check), so a page offers exactly the actions its POSTs accept."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.utils.module_loading import import_string
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from apps.core.principal import Principal

JOBS_WRITE = "jobs:write"
KEYS_READ = "keys:read"
KEYS_WRITE = "keys:write"


def may(principal: Principal, tenant: Any, scope: str) -> bool:
    """True when `principal` holds `scope` in `tenant`. A suspended tenant allows reads only, except to platform
    staff (the API's rule: writes there answer 403)."""
    if not principal.has_scope(scope, tenant.pk):
        return False
    return scope.endswith(":read") or not tenant.suspended or principal.is_platform


def require(principal: Principal, tenant: Any, scope: str) -> None:
    """PermissionDenied (403, what the REST API answers a viewer who writes) unless `may`."""
    if not may(principal, tenant, scope):
        raise PermissionDenied(f"your role in {tenant.slug} lacks {scope!r}")


def is_sso_session(session: Any) -> bool:
    """The session was opened by single sign-on: the backend Django recorded at login is an OIDC backend. (The
    backend path, not the `sso-` username prefix: a local account may be named so too.)"""
    path = session.get("_auth_user_backend") or ""
    if not path:
        return False
    try:
        backend = import_string(path)
    except ImportError:  # a backend removed from the settings since: not an OIDC session we can end there
        return False
    return isinstance(backend, type) and issubclass(backend, OIDCAuthenticationBackend)
