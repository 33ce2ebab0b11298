"""The authentication backend for OIDC single sign-on: users by the provider's `sub`, memberships by its claim."""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from ..services import memberships_sync_from_claims
from .discovery import provider_metadata

logger = logging.getLogger(__name__)

_USERNAME_SAFE = re.compile(r"[\w.@+-]{1,140}")


def username_for_sub(sub: str) -> str:
    """The local username of the provider's subject: `sso-<sub>`, or a digest when `sub` does not fit a username.

    Users are matched by `sub`, never by email: the subject is stable and unique at the provider, while an email
    can change or be reused, and matching on it would let a provider account with the email of a local admin
    take over that admin.
    """
    if _USERNAME_SAFE.fullmatch(sub):
        return f"sso-{sub}"
    return "sso-h-" + hashlib.sha256(sub.encode()).hexdigest()[:40]


class GryviaOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with endpoints from discovery, `sub` matching, and tenant claim sync."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django builds a backend for every request of a signed-in user (auth.get_user): nothing here may reach the
        # provider, so the endpoints below are resolved only when a login needs them.
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = get_user_model()

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802 - the name mozilla-django-oidc reads
        return provider_metadata()["token_endpoint"]

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return provider_metadata().get("userinfo_endpoint", "")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return provider_metadata()["jwks_uri"]

    def retrieve_matching_jwk(self, token: str) -> Any:
        """The provider's signing key; a token without `kid` is accepted only when the JWKS holds one key for its alg.

        mozilla-django-oidc requires `kid`, which OpenID makes optional for a provider with a single key.
        """
        header = jwt.get_unverified_header(token)
        if "kid" in header:
            return super().retrieve_matching_jwk(token)
        response = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        alg = header.get("alg")
        keys = [key for key in response.json().get("keys", []) if key.get("alg", alg) == alg]
        if len(keys) != 1:
            raise SuspiciousOperation(f"ID token without kid, and {len(keys)} provider keys for {alg}")
        return jwt.PyJWK(keys[0])

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The userinfo endpoint's claims over the ID token's (a provider without userinfo: the ID token's)."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            claims.update(super().get_userinfo(access_token, id_token, payload))
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))  # email is optional: users are matched by `sub`

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(username=username_for_sub(str(claims["sub"])))

    def create_user(self, claims: dict[str, Any]) -> Any:
        user = self.UserModel.objects.create_user(username_for_sub(str(claims["sub"])), email=claims.get("email", ""))
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        """Name and email follow the provider; memberships follow its tenant claim, on every login."""
        changed = {
            "email": claims.get("email", user.email) or "",
            "first_name": (claims.get("given_name") or user.first_name or "")[:150],
            "last_name": (claims.get("family_name") or user.last_name or "")[:150],
        }
        if any(getattr(user, name) != value for name, value in changed.items()):
            for name, value in changed.items():
                setattr(user, name, value)
            user.save(update_fields=list(changed))
        memberships_sync_from_claims(user=user, values=claims.get(settings.GRYVIA_OIDC_TENANT_CLAIM))
        return user
