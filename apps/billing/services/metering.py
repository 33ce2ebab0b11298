"""Usage from outside the job reconciler: batches of events from external meters, and the LLM gateway's tokens.

An event is stored once per (tenant, id): re-sending it changes nothing. "Accepted" means durably stored: the
batch's records and their ledger entries are committed before `usage_events_ingest` returns. On PostgreSQL the
stored ids are looked up in one query and the rest COPYed in as tuples (a concurrent writer's id falls back to
`INSERT … ON CONFLICT DO NOTHING`, apps.core.db.bulk_new.bulk_insert_new, which SQLite always uses), so a batch costs a
few statements whatever its size. Validation is plain Python (no serializer per event): a bad event refuses the
whole batch with its index and field, and nothing is written.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from operator import itemgetter
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Sum
from django.utils import timezone

from apps.core.db.bulk import copy_insert_rows
from apps.core.db.bulk_new import bulk_insert_new
from apps.llm.models import InferenceService, LlmUsageHourly
from apps.tenants.models import Tenant

from ..choices import UsageKind
from ..models import UsageRecord
from ..selectors import pricing
from . import ledger

MAX_BATCH = 10_000
EVENT_FIELDS = frozenset({"id", "start", "end", "gpu_type", "sku", "gpus", "cpu_cores", "memory_gib", "job", "queue"})
TOKENS_GRACE = dt.timedelta(minutes=10)  # an hour's roll-up is final this long after the hour ends
TOKENS_LOOKBACK = dt.timedelta(hours=48)


@dataclass
class IngestResult:
    accepted: int  # stored now or before: every event of the batch
    new: int
    duplicates: int


def _instant(value: Any, where: str) -> dt.datetime:
    if not isinstance(value, str):
        raise ValidationError({where: "must be an RFC 3339 timestamp such as 2026-09-03T10:00:00Z"})
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError({where: f"{value!r} is not an RFC 3339 timestamp"}) from None
    if moment.tzinfo is None:
        raise ValidationError({where: "needs a UTC offset (Z or +00:00)"})
    return moment.astimezone(dt.UTC).replace(microsecond=0)


_THOUSANDTH = Decimal("0.001")
_ZERO3 = Decimal(0).quantize(_THOUSANDTH)


def _number(value: Any, where: str) -> Decimal:
    if value == 0 and type(value) is int:  # the default of every event that leaves the field out
        return _ZERO3
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError({where: "must be a non-negative number"})
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValidationError({where: "must be a non-negative number"}) from None
    if not number.is_finite() or number < 0 or number > 10**9:
        raise ValidationError({where: "must be a non-negative number below 10^9"})
    return number.quantize(_THOUSANDTH)


def _text(event: dict[str, Any], name: str, where: str, limit: int) -> str:
    value = event.get(name, "")
    if not isinstance(value, str) or len(value) > limit:
        raise ValidationError({f"{where}.{name}": f"must be a string of at most {limit} characters"})
    return value


def _parse(index: int, event: Any, catalog: pricing.Catalog) -> dict[str, Any]:
    where = f"events[{index}]"
    if not isinstance(event, dict):
        raise ValidationError({where: "must be an object"})
    if not EVENT_FIELDS.issuperset(event):
        unknown = set(event) - EVENT_FIELDS
        raise ValidationError({f"{where}.{sorted(unknown)[0]}": "unknown field"})
    event_id = event.get("id")
    if not isinstance(event_id, str) or not 0 < len(event_id) <= 200:
        raise ValidationError({f"{where}.id": "is required: a string of 1 to 200 characters, unique per event"})
    start, end = _instant(event.get("start"), f"{where}.start"), _instant(event.get("end"), f"{where}.end")
    if end < start:
        raise ValidationError({f"{where}.end": "must not be before start"})
    gpus = event.get("gpus", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 100_000:
        raise ValidationError({f"{where}.gpus": "must be a whole number from 0 to 100000"})
    sku_name = _text(event, "sku", where, 63)
    gpu_type = _text(event, "gpu_type", where, 63) or ("any" if gpus else "cpu")
    if sku_name:
        sku = catalog.by_name(sku_name)
        if sku is None:
            raise ValidationError({f"{where}.sku": f"no SKU named {sku_name!r} in the catalog"})
        gpu_type = sku.gpu_type
    else:
        sku = catalog.in_force(gpu_type, start)
    cpu = _number(event.get("cpu_cores", 0), f"{where}.cpu_cores")
    memory = _number(event.get("memory_gib", 0), f"{where}.memory_gib")
    hours = pricing.hours_between(start, end)
    gpu_hours, cost = pricing.cost_of(sku=sku, gpus=gpus, cpu_cores=cpu, memory_gib=memory, hours=hours)
    return {
        "event_id": event_id,
        "name": f"event-{event_id}"[:200],
        "job_name": _text(event, "job", where, 200),
        "queue_name": _text(event, "queue", where, 63),
        "sku_id": sku.pk if sku else None,
        "sku_name": sku.name if sku else "",
        "gpu_type": gpu_type,
        "gpus": gpus,
        "cpu_cores": cpu,
        "memory_gib": memory,
        "start": start,
        "end": end,
        "gpu_hours": gpu_hours,
        "rate": sku.hourly_rate if sku else pricing.ZERO,
        "cost": cost,
        "currency": sku.currency if sku else pricing.DEFAULT_CURRENCY,
        "model": "",
        "input_tokens": 0,
        "output_tokens": 0,
    }


# The columns a stored record is written with (COPY on PostgreSQL): every row gives every one of them.
_NOT_A_JOB_RUN = {"job_pk": None, "job_uid": None, "run": 1, "reserved_gpus": 0}
_RECORD_COLUMNS = (
    "tenant_id", "uid", "name", "kind", "event_id", "job_pk", "job_uid", "job_name", "run", "reserved_gpus",
    "queue_name", "model", "input_tokens", "output_tokens", "sku_id", "sku_name", "gpu_type", "gpus", "cpu_cores",
    "memory_gib", "start", "end", "gpu_hours", "rate", "cost", "currency", "final", "refreshed_at", "created_at",
)  # fmt: skip
_VERSION_4 = ~(0xF000 << 64) & ~(0xC000 << 48)


def _uuid4_strings(count: int) -> list[str]:
    """`count` random (version 4) UUIDs as strings, from one read of the OS's random source: what uuid.uuid4()
    gives, without a UUID object per record."""
    raw = os.urandom(16 * count)
    out = []
    for offset in range(0, 16 * count, 16):
        value = int.from_bytes(raw[offset : offset + 16]) & _VERSION_4 | (0x4000 << 64) | (0x8000 << 48)
        text = f"{value:032x}"
        out.append(f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}")
    return out


def _stored_event_ids(tenant_id: int, ids: list[str]) -> set[str]:
    """Which of these event ids the tenant already stored (one query)."""
    table = connection.ops.quote_name(UsageRecord._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT event_id FROM {table} WHERE tenant_id = %s AND event_id = ANY(%s::varchar[])", [tenant_id, ids]
        )
        return {row[0] for row in cursor.fetchall()}


def _insert_new(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Insert the rows whose (tenant, event id) is not stored yet; returns those inserted, in order.

    PostgreSQL: the stored ids are looked up in one query and the rest COPYed straight in, as tuples; if a
    concurrent writer stored one of them meanwhile (a unique violation), the generic staging-table path with
    `INSERT … ON CONFLICT DO NOTHING` decides instead. SQLite: that `INSERT … ON CONFLICT` path directly.
    """
    if connection.vendor == "postgresql":
        stored = _stored_event_ids(rows[0]["tenant_id"], [row["event_id"] for row in rows])
        fresh = [row for row in rows if row["event_id"] not in stored]
        values = list(map(itemgetter(*_RECORD_COLUMNS), fresh))
        try:
            with transaction.atomic():
                copy_insert_rows(UsageRecord, _RECORD_COLUMNS, values)
            return fresh
        except IntegrityError:
            pass  # someone else stored one of these ids since the lookup
    new = set(bulk_insert_new(UsageRecord, rows, conflict=("tenant", "event_id"), returning="event_id"))
    return [row for row in rows if row["event_id"] in new]


def _store(tenant: Any, rows: list[dict[str, Any]], kind: str, now: dt.datetime) -> int:
    """Insert the rows that are new (by event id), final, and seal them. Returns how many were new. The rows are
    distinct by event id."""
    if not rows:
        return 0
    kind = str(getattr(kind, "value", kind))  # a plain str: COPY would write an Enum's name
    common = {"tenant_id": tenant.pk, "kind": kind, "final": True, "refreshed_at": now, "created_at": now}
    common.update(_NOT_A_JOB_RUN)
    for row, uid in zip(rows, _uuid4_strings(len(rows)), strict=True):
        row.update(common, uid=uid)
    entries = [
        (r["name"], r["uid"], kind, r["job_name"], r["sku_name"] or r["gpu_type"], r["start"], r["end"],
         r["gpu_hours"], r["rate"], r["cost"], r["currency"])
        for r in _insert_new(rows)
    ]  # fmt: skip
    return ledger.seal(tenant_id=tenant.pk, tenant_slug=tenant.slug, entries=entries, now=now)


def usage_events_ingest(*, tenant: Any, events: Any, now: dt.datetime | None = None) -> IngestResult:
    """Store a batch of external usage events of `tenant` (idempotent on each event's `id`), priced by the SKU in
    force at each event's start (or the one it names), final and sealed into the ledger, then commit."""
    if not isinstance(events, list) or not events:
        raise ValidationError({"events": "must be a non-empty list"})
    if len(events) > MAX_BATCH:
        raise ValidationError({"events": f"at most {MAX_BATCH} events per batch (got {len(events)})"})
    now = (now or timezone.now()).replace(microsecond=0)
    catalog = pricing.Catalog()
    rows: dict[str, dict[str, Any]] = {}
    for index, event in enumerate(events):
        row = _parse(index, event, catalog)
        rows.setdefault(row["event_id"], row)  # the same id twice in one batch: stored once
    with transaction.atomic():
        new = _store(tenant, list(rows.values()), UsageKind.EXTERNAL, now)
    return IngestResult(accepted=len(events), new=new, duplicates=len(events) - new)


def usage_tokens_collect(*, now: dt.datetime | None = None) -> int:
    """Turn the gateway's closed hourly roll-ups into final token records (one per tenant, model and hour), priced
    by the model's inference service (the tenant's own, else the shared one). Idempotent; periodic."""

    now = now or timezone.now()
    closed_before = (now - TOKENS_GRACE).replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    hours = (
        LlmUsageHourly.objects.filter(hour__gte=now - TOKENS_LOOKBACK, hour__lte=closed_before)
        .values("tenant_id", "model", "hour")
        .annotate(inp=Sum("input_tokens"), out=Sum("output_tokens"))
        .order_by("tenant_id", "hour", "model")
    )
    groups: dict[int, list[dict[str, Any]]] = {}
    for row in hours:
        groups.setdefault(row["tenant_id"], []).append(row)
    if not groups:
        return 0

    services = InferenceService.objects.filter(model_name__in={r["model"] for g in groups.values() for r in g})
    prices: dict[tuple[int | None, str], tuple[Decimal, Decimal]] = {}
    for service in services.order_by("name"):
        prices.setdefault(
            (service.tenant_id, service.model_name), (service.price_input_per_1m, service.price_output_per_1m)
        )
    written = 0
    with transaction.atomic():
        for tenant in Tenant.objects.filter(pk__in=groups):
            rows = []
            for row in groups[tenant.pk]:
                price_in, price_out = (
                    prices.get((tenant.pk, row["model"])) or prices.get((None, row["model"])) or (0, 0)
                )
                start = row["hour"].astimezone(dt.UTC)
                cost = pricing.q6((row["inp"] * Decimal(price_in) + row["out"] * Decimal(price_out)) / 10**6)
                stamp = ledger.rfc3339(start)
                rows.append(
                    {
                        "event_id": f"tokens:{row['model']}:{stamp}",
                        "name": f"tokens-{row['model']}-{start:%Y%m%d%H}"[:200],
                        "job_name": f"llm:{row['model']}"[:200],
                        "queue_name": "",
                        "model": row["model"],
                        "input_tokens": row["inp"],
                        "output_tokens": row["out"],
                        "sku_id": None,
                        "sku_name": "",
                        "gpu_type": "",
                        "gpus": 0,
                        "cpu_cores": pricing.ZERO,
                        "memory_gib": pricing.ZERO,
                        "start": start,
                        "end": start + dt.timedelta(hours=1),
                        "gpu_hours": pricing.ZERO,
                        "rate": pricing.ZERO,
                        "cost": cost,
                        "currency": pricing.DEFAULT_CURRENCY,
                    }
                )
            written += _store(tenant, rows, UsageKind.TOKENS, now.replace(microsecond=0))
    return written
