"""Per-credential request rate limits (the cache backend: in-process, or Redis shared by every replica), a limit per
client address on requests with no or a bad credential, and the `X-RateLimit-*` headers that tell a client where it
stands, as GitHub's and OpenAI's APIs do.

The client address is REMOTE_ADDR (DRF's NUM_PROXIES is 0): X-Forwarded-For is a client's to forge."""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin
from rest_framework import exceptions
from rest_framework.request import Request
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
            _keep_state(request, self)
        return allowed


class UncredentialedRateThrottle(SimpleRateThrottle):
    """Requests with no credential or a bad one, per client address, at GRYVIA_API_ANON_RATE (default 60/min) over a
    sliding window. The authentication classes `check` an address before they look a credential up and `count` each
    request that ends without one, so an address tests only so many guessed keys: once over, everything it sends is
    refused until the window moves on, a valid key too (answering that one would say the guess was right)."""

    scope = "anon"

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def check(self, request: Request) -> None:
        """Raise `Throttled` (a 429 with Retry-After) when the address is over its limit; counts nothing."""
        if self.rate is None:
            return
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        if len(self.history) >= self.num_requests:
            _keep_state(request, self)
            raise exceptions.Throttled(
                wait=self.wait(), detail="Too many requests with no or a bad credential from this address."
            )

    def count(self, request: Request) -> None:
        """Count one request without a valid credential, after `check` let it through."""
        if self.rate is None:
            return
        self.throttle_success()
        _keep_state(request, self)


def _keep_state(request: Request, throttle: SimpleRateThrottle) -> None:
    """Where the request's counter stands, for `RateLimitHeadersMiddleware`."""
    oldest = throttle.history[-1] if throttle.history else throttle.now
    request._request.gryvia_rate_limit = RateLimitState(
        limit=throttle.num_requests,
        remaining=max(0, throttle.num_requests - len(throttle.history)),
        reset=oldest + throttle.duration,
    )


class RateLimitHeadersMiddleware(MiddlewareMixin):
    """`X-RateLimit-Limit`, `-Remaining` and `-Reset` (epoch seconds) on every answer whose request a rate check
    counted, successes, 401s and 429s alike; a 429 also carries `Retry-After` (apps.core.api.exceptions)."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        state: RateLimitState | None = getattr(request, "gryvia_rate_limit", None)
        if state is not None:
            response["X-RateLimit-Limit"] = str(state.limit)
            response["X-RateLimit-Remaining"] = str(state.remaining)
            response["X-RateLimit-Reset"] = str(math.ceil(state.reset))
        return response
