"""Metering: one usage row per gateway request, written in batches by a thread, off the request path.

A request's row is queued in memory when the request ends (however it ends); the writer thread stores the queue
every `GRYVIA_LLM_METER_FLUSH_S` (default 1 s) and at shutdown: the rows in one INSERT, the hourly roll-ups
(tenant, key, model, hour) in one upsert, and the keys' `last_used_at` at most once a minute each. A batch that
fails to write is kept and retried with the next one (rows carry their request id, which is unique: a retried
batch cannot count twice). In the production profile each row is also in Redis from before the answer's last byte
(shared_counters.py), so a process killed before its flush loses none: the settlement pass writes them. Once a batch
is committed, those records are forgotten.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import threading
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import IntegrityError, close_old_connections, connection, transaction

from apps.core.db.bulk import bulk_insert
from apps.llm.models import LlmUsage, LlmUsageHourly
from apps.tenants.models import ApiKey

from .counters import counters

logger = logging.getLogger(__name__)
MAX_PENDING = 200_000


class Meter:
    """The queue of usage rows and the thread that writes them."""

    def __init__(self) -> None:
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_used: dict[str, dt.datetime] = {}
        self.written = 0

    def record(self, row: dict[str, Any]) -> None:
        """Queue one request's usage (LlmUsage fields, `tenant_id` and `key_pk` among them)."""
        with self._lock:
            if len(self._pending) >= MAX_PENDING:  # the database is down for long: keep the newest, say so
                logger.error("metering queue full (%d rows): dropping the oldest", len(self._pending))
                del self._pending[: len(self._pending) // 10]
            self._pending.append(row)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="gateway-meter", daemon=True)
            self._thread.start()
            atexit.register(self.stop)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(settings.GRYVIA_LLM_METER_FLUSH_S)
            self._wake.clear()
            self.flush()
            close_old_connections()  # this thread's connection, closed when CONN_MAX_AGE says so

    def stop(self) -> None:
        """Write what is queued and stop the thread (server shutdown)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self.flush()

    def flush(self) -> int:
        """Write every queued row now; returns how many were written."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return 0
        try:
            write_rows(batch)
            self._touch_keys(batch)
        except Exception:
            logger.exception("metering: could not write %d usage rows; retrying with the next batch", len(batch))
            with self._lock:
                self._pending[:0] = batch
            connection.close()
            return 0
        self.written += len(batch)
        try:
            counters().forget(batch)
        except Exception:  # the records stay in Redis; written again (once) only if this process dies
            logger.warning("metering: could not forget %d written rows' records in Redis", len(batch), exc_info=True)
        return len(batch)

    def _touch_keys(self, batch: list[dict[str, Any]]) -> None:
        now = dt.datetime.now(dt.UTC)
        due = {
            row["key_pk"]
            for row in batch
            if row.get("key_pk") and self._last_used.get(row["key_pk"], now - dt.timedelta(hours=1)) < now - _MINUTE
        }
        if due:
            ApiKey.all_tenants.filter(pk__in=due).exclude(last_used_at__gte=now - _MINUTE).update(last_used_at=now)
            self._last_used.update(dict.fromkeys(due, now))


_MINUTE = dt.timedelta(minutes=1)


def write_rows(batch: list[dict[str, Any]]) -> None:
    """Insert the usage rows and add them to the hourly roll-ups, in one transaction; rows whose request id is
    written already are skipped (a batch retried after a write whose reply was lost, a dead process's rows)."""
    fields = {f.attname for f in LlmUsage._meta.concrete_fields} - {"id"}
    rows = [{k: v for k, v in row.items() if k in fields} for row in batch]
    with transaction.atomic():
        try:
            with transaction.atomic():
                bulk_insert(LlmUsage, rows)
        except IntegrityError:
            seen = set(
                LlmUsage.objects.filter(request_id__in=[r["request_id"] for r in rows]).values_list(
                    "request_id", flat=True
                )
            )
            rows = [r for r in rows if r["request_id"] not in seen]
            bulk_insert(LlmUsage, rows)
        _roll_up(rows)


def _roll_up(rows: list[dict[str, Any]]) -> None:
    """Add the rows to their hourly roll-ups, in one upsert."""
    totals: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for row in rows:
        hour = row["created_at"].replace(minute=0, second=0, microsecond=0)
        total = totals[(row["tenant_id"], row["key_id"], row["model"], hour)]
        total[0] += 1
        total[1] += row["status"] >= 400
        total[2] += row["input_tokens"]
        total[3] += row["output_tokens"]
        total[4] += bool(row["estimated"])
    if not totals:
        return
    quote = connection.ops.quote_name
    table = quote(LlmUsageHourly._meta.db_table)
    columns = ("tenant_id", "key_id", "model", "hour", "requests", "errors", "input_tokens", "output_tokens")
    columns += ("estimated_requests",)
    counted = columns[4:]
    hour_field = LlmUsageHourly._meta.get_field("hour")
    values, params = [], []
    for (tenant_id, key_id, model, hour), total in totals.items():
        values.append("(" + ", ".join(["%s"] * len(columns)) + ")")
        params += [tenant_id, key_id, model, hour_field.get_db_prep_value(hour, connection), *total]
    updates = ", ".join(f"{quote(c)} = {table}.{quote(c)} + excluded.{quote(c)}" for c in counted)
    sql = (
        f"INSERT INTO {table} ({', '.join(quote(c) for c in columns)}) VALUES {', '.join(values)} "
        f"ON CONFLICT ({', '.join(quote(c) for c in columns[:4])}) DO UPDATE SET {updates}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


meter = Meter()
