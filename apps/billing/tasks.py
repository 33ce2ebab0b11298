"""Periodic billing work (GRYVIA_PERIODIC: the embedded ticker and Celery beat call these plain functions)."""

from __future__ import annotations

from . import services


def refresh_usage() -> dict[str, int]:
    """Open runs brought up to now (orphans closed), and the gateway's closed token hours turned into records."""
    return {"open": services.usage_refresh(), "token_records": services.usage_tokens_collect()}
