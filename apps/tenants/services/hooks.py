"""What other apps plug into the tenants app (filled in their AppConfig.ready()): listeners told after commit that
keys or tenants changed (the LLM gateway drops its cached keys), and the validator of a key's gateway limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

# The gateway limits an ApiKey stores (allowed models, requests and tokens per minute, tokens per day).
KEY_LIMIT_FIELDS = ("allowed_models", "requests_per_minute", "tokens_per_minute", "tokens_per_day")

KeyLimitValidator = Callable[[dict[str, Any]], dict[str, Any]]

_access_listeners: list[Callable[[], None]] = []
_key_limit_validators: list[KeyLimitValidator] = []


def on_access_changed(listener: Callable[[], None]) -> None:
    """Call `listener` after every commit that changed a key or a tenant's state or limits (registered once)."""
    if listener not in _access_listeners:
        _access_listeners.append(listener)


def access_changed() -> None:
    """After the current transaction commits, tell every listener that keys or tenants changed."""
    for listener in _access_listeners:
        transaction.on_commit(listener)


def register_key_limit_validator(validator: KeyLimitValidator) -> None:
    """`validator(limits) -> cleaned limits` checks the KEY_LIMIT_FIELDS present in `limits`, raising
    ValidationError naming a bad one (registered once)."""
    if validator not in _key_limit_validators:
        _key_limit_validators.append(validator)


def key_limits_clean(limits: dict[str, Any]) -> dict[str, Any]:
    """`limits` as every registered validator cleans it (as given where none is registered)."""
    for validator in _key_limit_validators:
        limits = validator(limits)
    return limits
