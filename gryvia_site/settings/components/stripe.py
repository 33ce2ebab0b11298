"""Stripe, test mode only (apps.billing.services.stripe_sync). docs/billing.md#stripe-test-mode.

The key and the webhook secret are read here and nowhere else; they are never logged nor stored elsewhere. A key
that is not a test-mode secret key (`sk_test_…`) is refused where it is used and by the system check
`billing.E001` (apps.billing.checks), so a live key can neither charge anyone nor go unnoticed.
"""

from django.core.exceptions import ImproperlyConfigured

from ..env import env_int, env_str

# A Stripe test-mode secret key (`sk_test_…`). Empty: sending invoices to Stripe answers 503.
GRYVIA_STRIPE_API_KEY = env_str("GRYVIA_STRIPE_API_KEY")
# The signing secret of the webhook endpoint (`whsec_…`). Empty: the webhook answers 503.
GRYVIA_STRIPE_WEBHOOK_SECRET = env_str("GRYVIA_STRIPE_WEBHOOK_SECRET")
# Where the Stripe API is (a fake such as localstripe in tests). Plain http only for a loopback address.
GRYVIA_STRIPE_API_BASE = env_str("GRYVIA_STRIPE_API_BASE", "https://api.stripe.com").rstrip("/")
# A webhook whose signed timestamp is older than this is refused (Stripe's default tolerance).
GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S = env_int("GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S", 300)
# Each call to Stripe: the whole request within this time, retried this many times (backoff with jitter; every
# write carries an idempotency key, so a retry never does it twice).
GRYVIA_STRIPE_TIMEOUT_S = float(env_str("GRYVIA_STRIPE_TIMEOUT_S", "15"))
GRYVIA_STRIPE_MAX_RETRIES = env_int("GRYVIA_STRIPE_MAX_RETRIES", 2)
# Invoices are sent for payment (collection_method=send_invoice), due this many days after finalization.
GRYVIA_STRIPE_DAYS_UNTIL_DUE = env_int("GRYVIA_STRIPE_DAYS_UNTIL_DUE", 30)

if not 0 < GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S <= 3600:
    raise ImproperlyConfigured(
        f"GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S must be in (0, 3600] seconds, got {GRYVIA_STRIPE_WEBHOOK_TOLERANCE_S}"
    )
if not 0 < GRYVIA_STRIPE_TIMEOUT_S <= 120:
    raise ImproperlyConfigured(f"GRYVIA_STRIPE_TIMEOUT_S must be in (0, 120] seconds, got {GRYVIA_STRIPE_TIMEOUT_S}")
if not 0 <= GRYVIA_STRIPE_MAX_RETRIES <= 10 or not 0 <= GRYVIA_STRIPE_DAYS_UNTIL_DUE <= 365:
    raise ImproperlyConfigured("GRYVIA_STRIPE_MAX_RETRIES must be in [0, 10], GRYVIA_STRIPE_DAYS_UNTIL_DUE in [0, 365]")
