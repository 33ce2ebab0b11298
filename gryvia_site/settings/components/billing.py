"""Billing (apps.billing). docs/billing.md."""

from django.core.exceptions import ImproperlyConfigured

from ..env import env_int

# How long a job without a timeout is assumed to run, for its cost estimate (POST /api/v1/jobs/estimate/).
GRYVIA_BILLING_DEFAULT_DURATION_S = env_int("GRYVIA_BILLING_DEFAULT_DURATION_S", 3600)

_DURATION = GRYVIA_BILLING_DEFAULT_DURATION_S
if _DURATION <= 0:
    raise ImproperlyConfigured(f"GRYVIA_BILLING_DEFAULT_DURATION_S must be positive, not {_DURATION}")
