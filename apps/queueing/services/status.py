"""Queue status (admitted usage, waiting count) written after each admission cycle."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from apps.core.db import fastjson
from apps.core.db.bulk import bulk_set
from apps.core.db.deferred import execute_or_defer
from apps.core.db.prepared import PreparedRead

from ..models import Queue

_QUEUE_STATUS = PreparedRead(
    lambda: Queue.all_tenants.values_list("pk", "tenant_id", "name", "status_admitted", "status_pending")
)


def queue_status_sync(
    *, admitted: dict[tuple[int, str], dict[str, int]], pending: dict[tuple[int, str], int]
) -> int | None:
    """Record each queue's admitted usage and waiting count after an admission cycle (only rows that changed; a
    queue named in neither map has none). Returns how many rows changed (None: inside a reconcile pass on
    PostgreSQL, sent with the pass's other writes, apps.core.db.deferred).

    Status, written by the admission cycle only (not audited: it is observed state, not a change anyone made). On
    PostgreSQL one UPDATE compares and writes (`_QUEUE_STATUS_SQL`); elsewhere one read, then one bulk write.
    """
    now = timezone.now()
    if connection.vendor == "postgresql":
        keys = admitted.keys() | pending.keys()
        values = [{"t": t, "n": n, "a": admitted.get((t, n), {}), "p": pending.get((t, n), 0)} for t, n in sorted(keys)]
        return execute_or_defer(_QUEUE_STATUS_SQL, [now, fastjson.compact(values, fastjson.not_json)])
    changed: dict[int, dict[str, Any]] = {}
    for pk, tenant_id, name, status_admitted, status_pending in _QUEUE_STATUS.rows():  # compiled once: every cycle
        usage, waiting = admitted.get((tenant_id, name), {}), pending.get((tenant_id, name), 0)
        if status_admitted != usage or status_pending != waiting:
            changed[pk] = {"status_admitted": usage, "status_pending": waiting, "status_updated_at": now}
    bulk_set(Queue, changed)
    return len(changed)


# Every queue's new status from one JSON parameter (queues it leaves out: nothing admitted, none waiting), written
# only where it differs. Its columns leave the queue table's epoch alone (apps.core.db.epochs).
_QUEUE_STATUS_SQL = """
UPDATE queueing_queue AS q
SET status_admitted = x.a, status_pending = x.p, status_updated_at = %s
FROM (
    SELECT q2.id, COALESCE(v.a, '{}'::jsonb) AS a, COALESCE(v.p, 0) AS p
    FROM queueing_queue AS q2
    LEFT JOIN json_to_recordset(%s::json) AS v(t bigint, n text, a jsonb, p integer)
        ON q2.tenant_id = v.t AND q2.name = v.n
) AS x
WHERE q.id = x.id AND (q.status_admitted IS DISTINCT FROM x.a OR q.status_pending IS DISTINCT FROM x.p)
"""
