"""Per-credential request rate limits (the cache backend: in-process, or Redis shared by every replica), and the
`X-RateLimit-*` headers that tell a client where it stands, as GitHub's and OpenAI's APIs do."""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin
from rest_framework.throttling import SimpleRateThrottle

from apps.core.principal import Principal


@dataclass(frozen=True)
class RateLimitState:
    """Where one credential stands after the request just counted (or refused)."""

    limit: int  # requests per window
    remaining: int  # requests left in the window now
    reset: float  # epoch seconds: the oldest request counted leaves the window, and one more is allowed


class CredentialRateThrottle(SimpleRateThrottle):
    """Limits each API key, OAuth user or session user to GRYVIA_API_RATE (default 1200/min), over a sliding window.
    What it counted is kept on the request for `RateLimitHeadersMiddleware`."""

    scope = "credential"

    def get_cache_key(self, request, view):
        principal = getattr(request, "auth", None)
        if not isinstance(principal, Principal):
            return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
        return self.cache_format % {"scope": self.scope, "ident": principal.label}

    def allow_request(self, request, view) -> bool:
        allowed = super().allow_request(request, view)
        if getattr(self, "key", None) is not None:  # the history read above: no second cache round trip
            oldest = self.history[-1] if self.history else self.now
            request._request.gryvia_rate_limit = RateLimitState(
                limit=self.num_requests,
                remaining=max(0, self.num_requests - len(self.history)),
                reset=oldest + self.duration,
            )
        return allowed


class RateLimitHeadersMiddleware(MiddlewareMixin):
    """`X-RateLimit-Limit`, `-Remaining` and `-Reset` (epoch seconds) on every answer whose request the rate check
    counted, successes and 429s alike; a 429 also carries `Retry-After` (apps.core.api.exceptions)."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        state: RateLimitState | None = getattr(request, "gryvia_rate_limit", None)
        if state is not None:
            response["X-RateLimit-Limit"] = str(state.limit)
            response["X-RateLimit-Remaining"] = str(state.remaining)
            response["X-RateLimit-Reset"] = str(math.ceil(state.reset))
        return response
