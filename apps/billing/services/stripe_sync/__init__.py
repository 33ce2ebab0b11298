"""Stripe, test mode only: finalized invoices sent to Stripe (`send`), Stripe's webhook applied (`webhook`), the
checked settings (`config`) and the thin layer over the `stripe` package (`gateway`). docs/billing.md#stripe-test-mode.
"""

from .config import (
    StripeConfig,
    StripeNotConfigured,
    StripeSettingRefused,
    StripeUnavailable,
    base_problem,
    key_problem,
    stripe_config,
    webhook_secret_problem,
)
from .gateway import StripeCallFailed, StripeGateway
from .send import idempotency_key, invoice_send_to_stripe, stripe_amount
from .webhook import WebhookRefused, WebhookResult, stripe_webhook_receive

__all__ = [
    "StripeCallFailed",
    "StripeConfig",
    "StripeGateway",
    "StripeNotConfigured",
    "StripeSettingRefused",
    "StripeUnavailable",
    "WebhookRefused",
    "WebhookResult",
    "base_problem",
    "idempotency_key",
    "invoice_send_to_stripe",
    "key_problem",
    "stripe_amount",
    "stripe_config",
    "stripe_webhook_receive",
    "webhook_secret_problem",
]
