"""The Stripe settings, checked: test-mode secret keys only, a safe API address, a webhook signing secret.

The same checks serve the system check (apps.billing.checks) and every use, so a key that is refused at start-up is
also refused if it is used anyway. Messages describe a refused key by its kind, never by its text.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

TEST_SECRET_KEY = re.compile(r"^sk_test_[A-Za-z0-9]+$")
WEBHOOK_SECRET = re.compile(r"^whsec_[A-Za-z0-9+/=_-]+$")
_KINDS = (
    ("sk_live_", "a live-mode secret key (sk_live_…)"),
    ("rk_live_", "a live-mode restricted key (rk_live_…)"),
    ("rk_test_", "a restricted key (rk_test_…)"),
    ("pk_", "a publishable key (pk_…)"),
    ("sk_test_", "not a well-formed test-mode secret key"),
)


class StripeUnavailable(Exception):
    """Stripe cannot be used with these settings (503): no key, a key that is not a test key, a bad address."""


class StripeNotConfigured(StripeUnavailable):
    """A setting Stripe needs is empty."""


class StripeSettingRefused(StripeUnavailable):
    """A Stripe setting is set but refused: a key that is not a test-mode secret key, a bad address or secret."""


def key_problem(key: str) -> str | None:
    """Why this key is refused (None: a test-mode secret key). Never quotes the key."""
    if TEST_SECRET_KEY.match(key):
        return None
    kind = next((text for prefix, text in _KINDS if key.startswith(prefix)), "not a Stripe secret key")
    return (
        f"GRYVIA_STRIPE_API_KEY is {kind}: Gryvia uses Stripe in test mode only and accepts only a test-mode "
        "secret key (sk_test_…, Stripe dashboard → Developers → API keys, with test mode on)"
    )


def base_problem(base: str) -> str | None:
    """Why this API address is refused: https, or plain http to a loopback address (a local fake); no path,
    credentials, query or fragment."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"GRYVIA_STRIPE_API_BASE must be an http(s) address such as https://api.stripe.com, got {base!r}"
    if parts.username or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        return "GRYVIA_STRIPE_API_BASE must be scheme://host[:port] only (no credentials, path, query or fragment)"
    if parts.scheme == "http" and not _loopback(parts.hostname):
        return (
            f"GRYVIA_STRIPE_API_BASE uses plain http to {parts.hostname}: the API key would cross the network "
            "unencrypted; use https (plain http is allowed for loopback fakes only)"
        )
    return None


def webhook_secret_problem(secret: str) -> str | None:
    if secret and not WEBHOOK_SECRET.match(secret):
        return "GRYVIA_STRIPE_WEBHOOK_SECRET must be the endpoint's signing secret (whsec_…)"
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class StripeConfig:
    """What one use of Stripe needs, read from the settings at that moment."""

    api_key: str
    api_base: str
    timeout_s: float
    max_retries: int
    days_until_due: int

    def __repr__(self) -> str:  # never print the key
        return f"StripeConfig(api_base={self.api_base!r}, timeout_s={self.timeout_s}, max_retries={self.max_retries})"


def stripe_config() -> StripeConfig:
    """The API settings, checked now (settings may change at run time, e.g. in tests).

    Raises:
        StripeNotConfigured: no key. StripeSettingRefused: a key that is not a test-mode secret key, or a bad address.
    """
    key = settings.GRYVIA_STRIPE_API_KEY
    if not key:
        raise StripeNotConfigured(
            "Stripe is not configured: set GRYVIA_STRIPE_API_KEY to a test-mode secret key (sk_test_…)"
        )
    problem = key_problem(key) or base_problem(settings.GRYVIA_STRIPE_API_BASE)
    if problem:
        raise StripeSettingRefused(problem)
    return StripeConfig(
        api_key=key,
        api_base=settings.GRYVIA_STRIPE_API_BASE.rstrip("/"),
        timeout_s=settings.GRYVIA_STRIPE_TIMEOUT_S,
        max_retries=settings.GRYVIA_STRIPE_MAX_RETRIES,
        days_until_due=settings.GRYVIA_STRIPE_DAYS_UNTIL_DUE,
    )


def webhook_secret() -> str:
    """The webhook signing secret, checked now.

    Raises:
        StripeNotConfigured: empty. StripeSettingRefused: not a `whsec_…` secret.
    """
    secret = settings.GRYVIA_STRIPE_WEBHOOK_SECRET
    if not secret:
        raise StripeNotConfigured(
            "the Stripe webhook is not configured: set GRYVIA_STRIPE_WEBHOOK_SECRET to the endpoint's signing secret"
        )
    problem = webhook_secret_problem(secret)
    if problem:
        raise StripeSettingRefused(problem)
    return secret
