"""Outbound webhooks (apps.webhooks) and the events they carry. docs/webhooks.md."""

import ipaddress

from django.core.exceptions import ImproperlyConfigured

from ..env import env_int, env_list, env_str

# Addresses the guard (apps.core.netguard) lets webhooks reach although they are not public, and the only ones
# reachable over plain http: CIDRs or single addresses, comma-separated. Empty: public addresses, https only.
GRYVIA_WEBHOOK_ALLOW_CIDRS = env_list("GRYVIA_WEBHOOK_ALLOW_CIDRS", [])
# One attempt: the whole request and response within this time; the response is read up to this size.
GRYVIA_WEBHOOK_TIMEOUT_S = float(env_str("GRYVIA_WEBHOOK_TIMEOUT_S", "10"))
GRYVIA_WEBHOOK_MAX_RESPONSE_BYTES = env_int("GRYVIA_WEBHOOK_MAX_RESPONSE_BYTES", 64 * 1024)
# Retries: the wait before the 2nd attempt, doubling (with ±25 % jitter) up to the cap, for as long as the horizon
# after the first attempt; the attempt after the horizon is the last.
GRYVIA_WEBHOOK_RETRY_BASE_S = float(env_str("GRYVIA_WEBHOOK_RETRY_BASE_S", "10"))
GRYVIA_WEBHOOK_RETRY_MAX_DELAY_S = float(env_str("GRYVIA_WEBHOOK_RETRY_MAX_DELAY_S", "3600"))
GRYVIA_WEBHOOK_RETRY_HORIZON_S = float(env_str("GRYVIA_WEBHOOK_RETRY_HORIZON_S", str(24 * 3600)))
# An endpoint whose last N deliveries all failed is disabled.
GRYVIA_WEBHOOK_DISABLE_AFTER = env_int("GRYVIA_WEBHOOK_DISABLE_AFTER", 10)
# After a secret rotation the old secret also signs for this long (both signatures are sent).
GRYVIA_WEBHOOK_ROTATION_GRACE_S = env_int("GRYVIA_WEBHOOK_ROTATION_GRACE_S", 24 * 3600)
# A worker claims a delivery for this long; one killed mid-delivery is retried once the lease ends.
GRYVIA_WEBHOOK_LEASE_S = float(env_str("GRYVIA_WEBHOOK_LEASE_S", "60"))
# One drain pass: at most this many deliveries, sent this many at a time, rounds started within this time (a pass
# can outlast it by one attempt's timeout).
GRYVIA_WEBHOOK_BATCH = env_int("GRYVIA_WEBHOOK_BATCH", 100)
GRYVIA_WEBHOOK_CONCURRENCY = env_int("GRYVIA_WEBHOOK_CONCURRENCY", 8)
GRYVIA_WEBHOOK_BUDGET_S = float(env_str("GRYVIA_WEBHOOK_BUDGET_S", "10"))

for _cidr in GRYVIA_WEBHOOK_ALLOW_CIDRS:
    try:
        ipaddress.ip_network(_cidr.strip(), strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"GRYVIA_WEBHOOK_ALLOW_CIDRS: {_cidr!r} is not a CIDR or an address") from _exc
if not 0 < GRYVIA_WEBHOOK_TIMEOUT_S <= 60:
    raise ImproperlyConfigured(f"GRYVIA_WEBHOOK_TIMEOUT_S must be in (0, 60], got {GRYVIA_WEBHOOK_TIMEOUT_S}")
if GRYVIA_WEBHOOK_LEASE_S <= GRYVIA_WEBHOOK_TIMEOUT_S:
    raise ImproperlyConfigured("GRYVIA_WEBHOOK_LEASE_S must be longer than GRYVIA_WEBHOOK_TIMEOUT_S")
if GRYVIA_WEBHOOK_RETRY_BASE_S <= 0 or GRYVIA_WEBHOOK_RETRY_HORIZON_S < 0 or GRYVIA_WEBHOOK_DISABLE_AFTER < 1:
    raise ImproperlyConfigured("webhook retry settings must be positive (GRYVIA_WEBHOOK_RETRY_*, _DISABLE_AFTER)")
