"""Periodic billing work (apps.core.periodic: the embedded ticker and Celery beat call these plain functions)."""

from __future__ import annotations

from apps.core.periodic import periodic

from . import services


@periodic("refresh-usage", every=60.0)
def refresh_usage() -> dict[str, int]:
    """Open runs brought up to now (orphans closed), reservations' records matched to what they hold, and the
    gateway's closed token hours turned into records."""
    return {
        "open": services.usage_refresh(),
        "reservation_changes": services.usage_reservations_sync(),
        "token_records": services.usage_tokens_collect(),
    }


@periodic("evaluate-budgets", every=60.0)
def evaluate_budgets() -> dict[str, int]:
    """Every budget's spend and state, and the thresholds crossed (each recorded and emitted once per period)."""
    return services.budgets_evaluate()
