"""System checks of the billing settings (`manage.py check`, and every start): a Stripe key that is not a
test-mode secret key is an error, so a live key is noticed before anything uses it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from .services.stripe_sync import base_problem, key_problem, webhook_secret_problem


@checks.register("billing")
def stripe_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors = []
    key = settings.GRYVIA_STRIPE_API_KEY
    if key and (problem := key_problem(key)):
        errors.append(checks.Error(problem, hint="unset it, or use a key from test mode", id="billing.E001"))
    if problem := base_problem(settings.GRYVIA_STRIPE_API_BASE):
        errors.append(checks.Error(problem, id="billing.E002"))
    if problem := webhook_secret_problem(settings.GRYVIA_STRIPE_WEBHOOK_SECRET):
        errors.append(checks.Error(problem, hint="copy it from the webhook endpoint in Stripe", id="billing.E003"))
    return errors
