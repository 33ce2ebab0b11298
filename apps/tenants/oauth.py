"""The OAuth2/OIDC validator: ID tokens and userinfo carry the user's tenant memberships, and only the flows Gryvia
serves are accepted (settings.GRYVIA_OAUTH_GRANT_TYPES; response type `code`; http redirects to loopback only)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.urls import reverse
from oauth2_provider.models import AbstractApplication
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors

from .selectors import memberships_of_user

# RFC 8252 §7.3: a native app receives its redirect on the loopback interface, over http.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class GryviaOAuth2Validator(OAuth2Validator):
    oidc_claim_scope = None  # every claim below is returned for the openid scope

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {
            "preferred_username": user.get_username(),
            "email": user.email,
            "memberships": [
                {"tenant": m.tenant.slug, "role": m.role}
                for m in memberships_of_user(user_id=user.pk).select_related("tenant").order_by("tenant__slug")
            ],
        }

    def validate_client_id(self, client_id: str, request: Any, *args: Any, **kwargs: Any) -> bool:
        """On the device authorization endpoint, a client registered for another grant is refused there and then:
        otherwise it would be handed a user code that its token exchange can never redeem."""
        if not super().validate_client_id(client_id, request, *args, **kwargs):
            return False
        device = request.client.authorization_grant_type == AbstractApplication.GRANT_DEVICE_CODE
        if not device and urlsplit(request.uri).path == reverse("oauth2_provider:device-authorization"):
            raise errors.UnauthorizedClientError(
                description=f"client {client_id!r} is not registered for the device flow: use a device-code client",
                request=request,
            )
        return True

    def validate_grant_type(
        self, client_id: str, grant_type: str, client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        if grant_type not in settings.GRYVIA_OAUTH_GRANT_TYPES:
            return False
        return super().validate_grant_type(client_id, grant_type, client, request, *args, **kwargs)

    def validate_response_type(
        self, client_id: str, response_type: str, client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        # Authorization code only: implicit and hybrid responses put tokens in the redirect URL.
        if response_type != "code":
            return False
        return super().validate_response_type(client_id, response_type, client, request, *args, **kwargs)

    def validate_redirect_uri(self, client_id: str, redirect_uri: str, request: Any, *args: Any, **kwargs: Any) -> bool:
        """https anywhere; http only to the loopback interface of a public (native) client."""
        parts = urlsplit(redirect_uri)
        if parts.scheme == "http" and (
            parts.hostname not in LOOPBACK_HOSTS or request.client.client_type != AbstractApplication.CLIENT_PUBLIC
        ):
            return False
        return super().validate_redirect_uri(client_id, redirect_uri, request, *args, **kwargs)
