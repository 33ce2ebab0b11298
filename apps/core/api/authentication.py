"""DRF authentication: Gryvia API keys and OAuth2 access tokens as `Authorization: Bearer`, and browser sessions.

Each class sets `request.auth` to an `apps.core.principal.Principal`; who a credential is, the identity provider
decides (apps.core.identity: the tenants app; an API key by the one check every door uses). A request that ends
without a valid credential is counted against its client address (`UncredentialedRateThrottle`), checked before any
credential is looked up. A valid API key that may not act now (its tenant suspended) is a 403, not counted.
"""

from __future__ import annotations

from oauth2_provider.contrib.rest_framework import OAuth2Authentication
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from apps.core.api.throttling import UncredentialedRateThrottle
from apps.core.identity import provider
from apps.core.principal import Principal, Refusal


def bearer_token(request: Request) -> str | None:
    header = authentication.get_authorization_header(request).decode("latin-1")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gry_<key_id>_<secret>`."""

    def authenticate(self, request: Request) -> tuple[object, Principal] | None:
        token = bearer_token(request)
        if token is None or not token.startswith("gry_"):
            return None
        guard = UncredentialedRateThrottle()
        guard.check(request)
        result = provider().api_key_authenticate(raw_key=token)
        if isinstance(result, Refusal):
            if result.status == 403:  # a valid key that may not act now (its tenant suspended): reads too
                raise exceptions.PermissionDenied(result.message, code=result.code)
            guard.count(request)
            raise exceptions.AuthenticationFailed(result.message, code=result.code)
        return result

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gryvia"'


class OAuthTokenAuthentication(OAuth2Authentication):
    """An OAuth2 access token issued by Gryvia's own provider (django-oauth-toolkit)."""

    def authenticate(self, request: Request) -> tuple[object, Principal] | None:
        token = bearer_token(request)
        if token is None or token.startswith("gry_"):
            return None
        guard = UncredentialedRateThrottle()
        guard.check(request)
        result = super().authenticate(request)
        if result is None:
            guard.count(request)
            raise exceptions.AuthenticationFailed("invalid, expired or revoked access token")
        user, access_token = result
        granted = access_token.scope.split()
        if "read" not in granted and "write" not in granted:  # e.g. `openid` alone: identity, not data
            raise exceptions.PermissionDenied("this access token was granted neither the 'read' nor the 'write' scope")
        return user, provider().principal_for_user(user=user, kind="oauth", read_only="write" not in granted)


class CsrfSessionAuthentication(authentication.SessionAuthentication):
    """A logged-in browser session (CSRF enforced on writes, as DRF does)."""

    def authenticate(self, request: Request) -> tuple[object, Principal] | None:
        result = super().authenticate(request)
        if result is None:
            return None
        user, _ = result
        return user, provider().principal_for_user(user=user, kind="session")


class NoCredential(authentication.BaseAuthentication):
    """Not a credential: last of the authentication classes, so only a request that presented none of theirs reaches
    it. It counts that request against its client address and authenticates nothing (the answer is a 401)."""

    def authenticate(self, request: Request) -> None:
        guard = UncredentialedRateThrottle()
        guard.check(request)
        guard.count(request)
