"""The provider's discovery document, fetched at the first login and cached, never at start-up."""

from __future__ import annotations

import threading
import time
from typing import Any

import requests
from django.conf import settings

CACHE_SECONDS = 3600  # a provider that moves its endpoints is seen within the hour
_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_lock = threading.Lock()


class ProviderUnavailable(Exception):
    """The provider could not be reached or answered something unusable; the message says which, for the page."""


def provider_metadata() -> dict[str, Any]:
    """`<issuer>/.well-known/openid-configuration`, cached for CACHE_SECONDS; a failure is not cached."""
    issuer = settings.GRYVIA_OIDC_PROVIDER_URL
    now = time.monotonic()
    with _lock:
        cached = _cache.get(issuer)
        if cached and cached[0] > now:
            return cached[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=getattr(settings, "OIDC_TIMEOUT", 10))
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"the sign-in provider at {issuer} did not answer discovery: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"the discovery document at {url} is not a JSON object")
    missing = [key for key in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(key)]
    if missing:
        raise ProviderUnavailable(f"the discovery document at {url} lacks {', '.join(missing)}")
    with _lock:
        _cache[issuer] = (now + CACHE_SECONDS, document)
    return document


def forget() -> None:
    """Drop the cached documents (tests; a provider that changed its endpoints)."""
    with _lock:
        _cache.clear()
