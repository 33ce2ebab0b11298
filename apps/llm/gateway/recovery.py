"""What survives a gateway process's death (production profile): the settlement pass, and the durable usage a lost
day counter is rebuilt from.

`settle_dead_replicas` is periodic ("settle-llm-reservations", registered in apps/llm/tasks.py): for each process whose
lease in Redis is gone, it writes the usage rows of the requests it had answered (their records hold the rows) and
settles each reservation it left open as estimated usage (the prompt's estimate plus the output it allowed,
status 502, `estimated`), then forgets them. Each step is idempotent, so a pass that dies half-way is redone by the
next one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum

from apps.llm.models import LlmUsage, LlmUsageHourly

from .counters import counters
from .db import off_loop
from .meter import write_rows
from .shared_counters import REPLICAS, TOMB, alive_key, records_key

logger = logging.getLogger(__name__)
REPLICA_DIED = 502  # what the client of a request whose process died saw: the connection broke
TOMB_TTL_S = 900  # a dead process's settled records stay as tombstones this long, then its hash goes


@off_loop
def durable_usage(
    day_start: dt.datetime, tenant_id: int, key_id: str | None, request_ids: Collection[str]
) -> tuple[int, set[str]]:
    """The day's tokens written to the database (for the tenant, or one of its keys) and which of `request_ids`
    it includes, read in one snapshot: a meter batch that commits meanwhile is in both answers or in neither."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rows = LlmUsageHourly.objects.filter(tenant_id=tenant_id, hour__gte=day_start)
        if key_id is not None:
            rows = rows.filter(key_id=key_id)
        totals = rows.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
        written: set[str] = set()
        ids = list(request_ids)
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            written.update(LlmUsage.objects.filter(request_id__in=chunk).values_list("request_id", flat=True))
    return (totals["i"] or 0) + (totals["o"] or 0), written


def estimated_row(record: dict[str, Any]) -> dict[str, Any]:
    """The usage row of a request whose process died before it settled: the prompt's estimate and all the output
    it was allowed (what the quota held for it), flagged estimated."""
    return {
        **{k: v for k, v in record.items() if k not in ("reserved", "output_allowed")},
        "input_tokens": record["input_tokens"],
        "output_tokens": record["output_allowed"],
        "estimated": True,
        "status": REPLICA_DIED,
        "latency_ms": 0.0,
        "ttft_ms": None,
    }


def _as_row(record: dict[str, Any]) -> dict[str, Any]:
    row = dict(record)
    row["created_at"] = dt.datetime.fromisoformat(row["created_at"])
    return row


def settle_dead_replicas() -> int:
    """Settle what every dead gateway process left in Redis; returns how many requests were written."""
    if not settings.REDIS_URL:
        return 0  # the embedded profile's one process holds its reservations in memory: they die with it
    shared = counters()
    client = shared.sync
    total = 0
    for replica in client.smembers(REPLICAS):
        if replica == shared.replica or client.exists(alive_key(replica)):
            continue
        records = records_key(replica)
        rows = []
        for raw in client.hvals(records):
            record = None if raw == TOMB else json.loads(raw)
            if record is not None and not record.get("settled"):
                record = _settle_open(shared, records, record)
            if record is not None:
                rows.append(_as_row(record))
        if rows:
            write_rows(rows)
            shared.forget(rows, records=records)
            # a process that was only slow finds these and leaves them alone; they go with its hash
            client.hset(records, mapping={r["request_id"]: TOMB for r in rows})
            client.expire(records, TOMB_TTL_S)
            logger.warning("gateway: settled %d requests of the dead process %s", len(rows), replica)
            total += len(rows)
        elif not client.exists(records):
            client.srem(REPLICAS, replica)
    return total


def _settle_open(shared, records: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """Settle one open reservation as estimated usage (the settle script moves the counters once: a record that
    its process settled meanwhile is taken as it stands)."""
    row = estimated_row(record)
    if shared.settle_record(records, record, row["input_tokens"] + row["output_tokens"], row):
        return row
    raw = shared.sync.hget(records, record["request_id"])
    return None if raw is None or raw == TOMB else json.loads(raw)
