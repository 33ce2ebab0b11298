"""OIDC single sign-on for people (mozilla-django-oidc): Gryvia as a *client* of the organisation's provider.

Not to be confused with components/oauth.py, where Gryvia is an OAuth2/OIDC *provider* for its CLI. SSO is on only
when GRYVIA_OIDC_PROVIDER_URL and GRYVIA_OIDC_CLIENT_ID are set; otherwise none of it is installed or mounted.
"""

from __future__ import annotations

from typing import Any

from ..env import env_str
from .core import AUTHENTICATION_BACKENDS as _BACKENDS
from .core import TEMPLATES as _TEMPLATES

OIDC_BACKEND = "apps.tenants.sso.backend.GryviaOIDCBackend"
OIDC_CONTEXT_PROCESSOR = "apps.tenants.sso.context.sso"


def oidc_settings(
    *, provider_url: str, client_id: str, client_secret: str, scopes: str, tenant_claim: str
) -> dict[str, Any]:
    """The settings SSO needs, as one dict: the tests apply it with a provider they start themselves."""
    enabled = bool(provider_url and client_id)
    values: dict[str, Any] = {
        # The issuer: its endpoints are read from `<issuer>/.well-known/openid-configuration` at the first login,
        # not at start-up, so Gryvia starts (and local logins work) while the provider is down.
        "GRYVIA_OIDC_PROVIDER_URL": provider_url.rstrip("/"),
        "GRYVIA_OIDC_CLIENT_ID": client_id,
        "GRYVIA_OIDC_CLIENT_SECRET": client_secret,
        "GRYVIA_OIDC_SCOPES": scopes,
        "GRYVIA_OIDC_TENANT_CLAIM": tenant_claim,
        "GRYVIA_OIDC_ENABLED": enabled,
        # The login page's "Sign in with SSO" follows this flag (apps.tenants.sso.context), configured or not.
        "TEMPLATES": [
            {
                **_TEMPLATES[0],
                "OPTIONS": {
                    **_TEMPLATES[0]["OPTIONS"],
                    "context_processors": [
                        *_TEMPLATES[0]["OPTIONS"]["context_processors"],
                        OIDC_CONTEXT_PROCESSOR,
                    ],
                },
            },
            *_TEMPLATES[1:],
        ],
    }
    if not enabled:
        return values
    values.update(
        {
            "AUTHENTICATION_BACKENDS": [*_BACKENDS, OIDC_BACKEND],
            # mozilla-django-oidc's own names.
            "OIDC_RP_CLIENT_ID": client_id,
            "OIDC_RP_CLIENT_SECRET": client_secret,
            "OIDC_RP_SCOPES": scopes,
            "OIDC_RP_SIGN_ALGO": "RS256",  # verified against the provider's jwks_uri
            "OIDC_USE_PKCE": True,
            "OIDC_TIMEOUT": 10,  # seconds per call to the provider: a hung provider gives an error page, not a hang
            # Kept for the provider's end-session endpoint (id_token_hint) at logout.
            "OIDC_STORE_ID_TOKEN": True,
            "OIDC_OP_LOGOUT_URL_METHOD": "apps.tenants.sso.views.provider_logout_url",
            "OIDC_VERIFY_SSL": True,
            # Where the callback lands without a `next`: the dashboard's overview (Django's default,
            # /accounts/profile/, is no page here; tests/dashboard/test_browser.py caught it).
            "LOGIN_REDIRECT_URL": "/",
        }
    )
    return values


globals().update(
    oidc_settings(
        provider_url=env_str("GRYVIA_OIDC_PROVIDER_URL"),
        client_id=env_str("GRYVIA_OIDC_CLIENT_ID"),
        client_secret=env_str("GRYVIA_OIDC_CLIENT_SECRET"),
        scopes=env_str("GRYVIA_OIDC_SCOPES") or "openid email profile",
        tenant_claim=env_str("GRYVIA_OIDC_TENANT_CLAIM") or "groups",
    )
)
