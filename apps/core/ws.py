"""Websocket handshake: the origin check, and the credential the consumer checks (`Authorization: Bearer <API key or
OAuth token>`, or the browser's session cookie)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from channels.sessions import SessionMiddlewareStack
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from .liveauth import LiveCredential, credential_from_bearer

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) as browsers compare origins; None for anything that is not an http(s) origin."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _came_in_secure(scope: dict[str, Any]) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)  # Django's own setting for a TLS proxy in front
    if proxy:
        header, secure_value = proxy
        name = header.removeprefix("HTTP_").lower().replace("_", "-").encode()
        return _header(scope, name).split(",")[0].strip() == secure_value
    return False


def _own_origin(scope: dict[str, Any]) -> tuple[str, str, int] | None:
    """The origin this request was made to: its Host (when ALLOWED_HOSTS has it) and the scheme it came in on."""
    host = _header(scope, b"host")
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS or ([".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    if not domain or not validate_host(domain, allowed):
        return None
    return _origin(f"{'https' if _came_in_secure(scope) else 'http'}://{host}")


def origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether the handshake's Origin is one of this site's: scheme, host and port each equal to those of the request
    itself, of GRYVIA_PUBLIC_URL or of a CSRF_TRUSTED_ORIGINS entry (`https://*.example.com` for its subdomains), as
    Django checks the Origin of an unsafe HTTP request."""
    origin = _origin(_header(scope, b"origin"))
    if origin is None:
        return False
    exact = {_origin(settings.GRYVIA_PUBLIC_URL), _own_origin(scope)}
    exact |= {_origin(trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS if "*" not in trusted}
    if origin in exact:
        return True
    netloc = urlsplit(_header(scope, b"origin")).netloc.lower()
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        scheme, _, pattern = trusted.partition("://")
        if "*" in pattern and scheme.lower() == origin[0] and is_same_domain(netloc, pattern.lower().lstrip("*")):
            return True
    return False


class OriginValidator:
    """Refuses the handshake (HTTP 403) unless `origin_allowed`: a page on another origin (another port of this very
    host included) cannot open a socket with the browser's session cookie."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.inner(scope, receive, send)


class _CredentialMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        auth = _header(scope, b"authorization")
        credential: LiveCredential | None = None
        if auth.lower().startswith("bearer "):
            token = auth[7:].strip()
            credential = credential_from_bearer(token) if token else None
        else:
            session = scope.get("session")
            session_key = getattr(session, "session_key", None)
            credential = LiveCredential(kind="session", session_key=session_key) if session_key else None
        return await self.inner({**scope, "credential": credential}, receive, send)


def CredentialMiddleware(inner: Any) -> Any:  # noqa: N802 - reads like the Channels middleware it wraps
    """Puts the handshake's credential, unchecked, in `scope["credential"]`: the consumer checks it (and again later,
    apps.core.liveauth)."""
    return SessionMiddlewareStack(_CredentialMiddleware(inner))
