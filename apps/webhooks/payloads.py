"""What an endpoint receives for an event (Standard Webhooks JSON or Slack text), and which job events it selects.

Pure functions, no I/O.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from .choices import Format

_PHASE_WORDS = {
    "job.queued": "is queued",
    "job.running": "is running",
    "job.succeeded": "succeeded",
    "job.failed": "failed",
    "job.cancelled": "was cancelled",
    "job.preempted": "was preempted",
    "job.rejected": "was rejected",
}


def job_selected(*, names: list[str], labels: dict[str, str], match: dict[str, Any]) -> bool:
    """Whether a job event passes an endpoint's selectors: its name matches one pattern (if any are set) and it
    carries every selected label. Events that are not about a job have no `match` and always pass."""
    if not match:
        return True
    if names and not any(fnmatch.fnmatchcase(match.get("name", ""), pattern) for pattern in names):
        return False
    have = match.get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def standard_body(*, event_id: str, type: str, created_at: str, tenant: str, data: dict[str, Any]) -> bytes:
    """`{"type", "timestamp", "data"}` as the Standard Webhooks payload structure recommends, plus `id` and
    `tenant`. Compact and key-ordered, so a retry sends the same bytes."""
    payload = {"id": event_id, "type": type, "timestamp": created_at, "tenant": tenant, "data": data}
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def slack_text(*, type: str, tenant: str, data: dict[str, Any]) -> str:
    """A one-line summary a person reads in a channel."""
    job = data.get("job")
    if type in _PHASE_WORDS and isinstance(job, dict):
        text = f"Job {tenant}/{job.get('name')} {_PHASE_WORDS[type]}"
        detail = job.get("message") or job.get("reason")
        return f"{text}: {detail}" if detail else text
    budget = data.get("budget")
    if type == "budget.threshold_crossed" and isinstance(budget, dict):
        return (
            f"Budget {tenant}/{budget.get('name')} crossed {budget.get('threshold')}%: {budget.get('spent')} of "
            f"{budget.get('amount')} {budget.get('currency')} spent ({budget.get('percent')}%)"
        )
    if type == "webhook.disabled":
        return f"Gryvia webhook {data.get('endpoint')} ({data.get('url')}) was disabled: {data.get('reason')}"
    if type == "ping":
        return f"Gryvia test event for webhook {data.get('endpoint')} in tenant {tenant}"
    return f"Gryvia {type} in tenant {tenant}: " + json.dumps(data, sort_keys=True)[:500]


def body(*, format: str, event_id: str, type: str, created_at: str, tenant: str, data: dict[str, Any]) -> bytes:
    if format == Format.SLACK:
        return json.dumps({"text": slack_text(type=type, tenant=tenant, data=data)}).encode()
    return standard_body(event_id=event_id, type=type, created_at=created_at, tenant=tenant, data=data)
