"""The template flag for the login page's "Sign in with SSO"."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def sso(request: HttpRequest) -> dict[str, bool]:
    """`oidc_enabled`: true when GRYVIA_OIDC_PROVIDER_URL and GRYVIA_OIDC_CLIENT_ID are set."""
    return {"oidc_enabled": bool(getattr(settings, "GRYVIA_OIDC_ENABLED", False))}
