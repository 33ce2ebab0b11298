"""Per-credential request rate limits (the cache backend: in-process, or Redis shared by every replica)."""

from __future__ import annotations

from rest_framework.throttling import SimpleRateThrottle

from apps.core.principal import Principal


class CredentialRateThrottle(SimpleRateThrottle):
    """Limits each API key, OAuth user or session user to GRYVIA_API_RATE (default 1200/min)."""

    scope = "credential"

    def get_cache_key(self, request, view):
        principal = getattr(request, "auth", None)
        if not isinstance(principal, Principal):
            return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
        return self.cache_format % {"scope": self.scope, "ident": principal.label}
