"""The hash-chained ledger: canonical fields, hashing (version `v1`), appending under the tenant's head lock, and
verification.

Hash input (v1): 17 fields joined by LF, no trailing newline, UTF-8, in this order: `v1`, tenant, sequence
(base 10), prevHash, usageRecord namespace, name and uid, kind, job, sku, start, end, gpuHours, rate, cost,
currency, recordedAt. Times are RFC 3339 UTC at whole seconds (`2026-09-03T10:00:00Z`); hours, rates and costs
are decimal strings with exactly 6 fractional digits. `hash = hex(sha256(input))`, the upstream's scheme, pinned
to its golden vector in tests.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db import connection
from django.utils import timezone

from apps.core.db.bulk import copy_insert_rows
from apps.core.db.deferred import execute_or_defer

from ..models import LedgerEntry, LedgerHead, UsageRecord

HASH_VERSION = "v1"
SIX = Decimal("0.000001")
CANONICAL_FIELDS = (
    "tenant",
    "sequence",
    "prev_hash",
    "record_namespace",
    "record_name",
    "record_uid",
    "kind",
    "job",
    "sku",
    "start",
    "end",
    "gpu_hours",
    "rate",
    "cost",
    "currency",
    "recorded_at",
)


def decimal6(value: Decimal | int | str) -> str:
    """`5` -> `"5.000000"` (half-up at the 6th place)."""
    return str(Decimal(value).quantize(SIX, rounding=ROUND_HALF_UP))


def rfc3339(value: dt.datetime) -> str:
    """A UTC instant at whole seconds: `2026-09-03T10:00:00Z`."""
    # isoformat() is several times faster than strftime(), and this runs twice for every sealed record.
    return value.astimezone(dt.UTC).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def hash_input(fields: dict[str, Any]) -> bytes:
    """The v1 bytes that are hashed, from the canonical fields (names as in CANONICAL_FIELDS)."""
    parts = [HASH_VERSION] + [str(fields[name]) for name in CANONICAL_FIELDS]
    return "\n".join(parts).encode("utf-8")


def entry_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(hash_input(fields)).hexdigest()


def _lock_heads(tenant_ids: Sequence[int]) -> dict[int, tuple[int, str]]:
    """Take the tenants' head row locks and read them (tenant id -> (sequence, hash)), in one statement: an upsert
    that writes each row to itself (row locks on PostgreSQL, the write lock on SQLite), creating it at sequence 0 the
    first time. Rows are locked in the order given: callers pass ascending ids, so two appenders never deadlock."""
    sql, params = lock_heads_statement(tenant_ids)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return locked_heads(cursor.fetchall())


def lock_heads_statement(tenant_ids: Sequence[int]) -> tuple[str, list[int]]:
    """`_lock_heads`'s statement (ids ascending, not empty), for a caller to send with others in one round trip
    (apps.core.db.deferred.read_together); `locked_heads(rows)` reads its rows, for `append(heads=)`."""
    quote = connection.ops.quote_name
    table = quote(LedgerHead._meta.db_table)
    values = ", ".join(["(%s, 0, '')"] * len(tenant_ids))
    return (
        f"INSERT INTO {table} (tenant_id, sequence, hash) VALUES {values} "
        f"ON CONFLICT (tenant_id) DO UPDATE SET sequence = {table}.sequence RETURNING tenant_id, sequence, hash",
        list(tenant_ids),
    )


def locked_heads(rows: Iterable[tuple[int, int, str]]) -> dict[int, tuple[int, str]]:
    return {tenant_id: (sequence, hash_) for tenant_id, sequence, hash_ in rows}


def _move_heads(heads: dict[int, tuple[int, str]]) -> None:
    """Set the locked heads to their new (sequence, hash), in one statement (the same text for any number of heads
    of a given count: no QuerySet is built for it)."""
    quote = connection.ops.quote_name
    table = quote(LedgerHead._meta.db_table)
    cast = "::bigint" if connection.vendor == "postgresql" else ""
    values = ", ".join([f"(%s{cast}, %s{cast}, %s)"] * len(heads))
    params = [v for tenant_id, (sequence, hash_) in heads.items() for v in (tenant_id, sequence, hash_)]
    execute_or_defer(  # (inside a reconcile pass: sent with its next statement, apps.core.db.deferred)
        f"WITH moved (tenant_id, sequence, hash) AS (VALUES {values}) "
        f"UPDATE {table} SET sequence = moved.sequence, hash = moved.hash FROM moved "
        f"WHERE {table}.tenant_id = moved.tenant_id",
        params,
    )


def head_lock(*, tenant_id: int) -> LedgerHead:
    """Lock the tenant's chain head until the caller's transaction ends (no append can happen meanwhile) and read
    it. Finalizing an invoice holds it, so what it checked is what it bills."""
    sequence, hash_ = _lock_heads([tenant_id])[tenant_id]
    return LedgerHead(tenant_id=tenant_id, sequence=sequence, hash=hash_)


@dataclass
class Sealable:
    """What the ledger needs of a final usage record (records ingested in bulk never become model instances)."""

    tenant_id: int
    tenant_slug: str
    uid: str
    name: str
    kind: str
    job: str
    sku: str
    start: dt.datetime
    end: dt.datetime
    gpu_hours: Decimal
    rate: Decimal
    cost: Decimal
    currency: str

    @classmethod
    def of(cls, record: UsageRecord, tenant_slug: str) -> Sealable:
        return cls(
            tenant_id=record.tenant_id,
            tenant_slug=tenant_slug,
            uid=str(record.uid),
            name=record.name,
            kind=record.kind,
            job=record.job_name,
            sku=record.sku_name or record.gpu_type,
            start=record.start,
            end=record.end or record.start,
            gpu_hours=record.gpu_hours,
            rate=record.rate,
            cost=record.cost,
            currency=record.currency,
        )


# The columns an entry is written with, in the order `append` builds them: the hashed fields, then the hash.
_ENTRY_COLUMNS = ("tenant_id", "tenant_slug", *CANONICAL_FIELDS[1:], "hash_version", "hash")


def append(
    records: Iterable[Sealable], *, now: dt.datetime | None = None, heads: dict[int, tuple[int, str]] | None = None
) -> int:
    """Seal final records into their tenants' chains (in the caller's transaction). Returns the entries written.
    `heads`: the tenants' heads, already locked in this transaction by the caller (`lock_heads_statement`)."""
    by_tenant: dict[int, tuple[str, list[tuple]]] = {}
    for r in records:
        entry = (r.name, r.uid, r.kind, r.job, r.sku, r.start, r.end, r.gpu_hours, r.rate, r.cost, r.currency)
        by_tenant.setdefault(r.tenant_id, (r.tenant_slug, []))[1].append(entry)
    return _seal({tenant_id: by_tenant[tenant_id] for tenant_id in sorted(by_tenant)}, now, heads)


def seal(*, tenant_id: int, tenant_slug: str, entries: Iterable[Sequence[Any]], now: dt.datetime | None = None) -> int:
    """Seal one tenant's final records, given as tuples (name, uid, kind, job, sku, start, end, gpu_hours, rate,
    cost, currency), into its chain, in the caller's transaction. Returns the entries written."""
    return _seal({tenant_id: (tenant_slug, entries)}, now)


def _seal(
    by_tenant: dict[int, tuple[str, Iterable[Sequence[Any]]]],
    now: dt.datetime | None,
    heads: dict[int, tuple[int, str]] | None = None,
) -> int:
    """Seal the entries of each tenant (tenant id -> (slug, entry tuples), ids ascending) in three statements for
    all of them together: lock and read the heads, insert every entry (COPY on PostgreSQL), move the heads.

    Each tenant's entries are numbered after its head and hashed each over its predecessor. `record_uid` is unique,
    so sealing a record twice fails instead of forking. Entries are built as plain tuples in one pass: this runs
    for every ingested event.
    """
    if not by_tenant:
        return 0
    recorded_at = rfc3339(now or timezone.now())
    sha256 = hashlib.sha256
    if heads is None or not by_tenant.keys() <= heads.keys():
        heads = _lock_heads(list(by_tenant))
    rows = []
    moved: dict[int, tuple[int, str]] = {}
    for tenant_id, (tenant_slug, entries) in by_tenant.items():
        namespace = f"tenant-{tenant_slug}"
        sequence, prev = heads[tenant_id]
        first = len(rows)
        for name, uid, kind, job, sku, start, end, gpu_hours, rate, cost, currency in entries:
            sequence += 1
            # The v1 layout: CANONICAL_FIELDS in order, each as the string that is hashed and stored.
            hashed = (
                tenant_slug,
                str(sequence),
                prev,
                namespace,
                str(name),
                str(uid),
                str(kind),
                str(job),
                str(sku),
                rfc3339(start),
                rfc3339(end),
                decimal6(gpu_hours),
                decimal6(rate),
                decimal6(cost),
                str(currency),
                recorded_at,
            )
            prev = sha256("\n".join((HASH_VERSION, *hashed)).encode("utf-8")).hexdigest()
            rows.append((tenant_id, tenant_slug, sequence, *hashed[2:], HASH_VERSION, prev))
        if len(rows) > first:
            moved[tenant_id] = (sequence, prev)
    if rows:
        copy_insert_rows(LedgerEntry, _ENTRY_COLUMNS, rows)
        _move_heads(moved)
    return len(rows)


@dataclass
class Verification:
    tenant: str
    entries: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)
    head_sequence: int = 0
    head_hash: str = ""
    hash_version: str = HASH_VERSION

    @property
    def valid(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "entries": self.entries,
            "valid": self.valid,
            "problems": self.problems,
            "headSequence": self.head_sequence,
            "headHash": self.head_hash,
            "hashVersion": self.hash_version,
        }


def verify(*, tenant_id: int, tenant_slug: str, batch: int = 5000) -> Verification:
    """Walk the tenant's chain in sequence order: numbering without gaps or duplicates, each prevHash equal to the
    previous hash, each hash equal to a fresh recomputation. Problems are collected, never raised."""
    result = Verification(tenant=tenant_slug)
    prev, expected, last = "", 1, 0
    columns = ("id", "tenant_slug", "hash", *[n for n in CANONICAL_FIELDS if n != "tenant"])
    queryset = LedgerEntry.all_tenants.filter(tenant_id=tenant_id).order_by("sequence", "id")
    seen = -1  # keyset pagination on (tenant, sequence), which is unique
    while True:
        chunk: Sequence[dict[str, Any]] = list(queryset.filter(sequence__gt=seen).values(*columns)[:batch])
        for row in chunk:
            seq = row["sequence"]
            if seq != expected:
                result.problems.append({"sequence": seq, "problem": f"sequence {seq} where {expected} was expected"})
            if row["prev_hash"] != prev:
                result.problems.append({"sequence": seq, "problem": "prevHash is not the previous entry's hash"})
            fields = {n: row[n] for n in CANONICAL_FIELDS if n != "tenant"} | {"tenant": row["tenant_slug"]}
            if entry_hash(fields) != row["hash"]:
                result.problems.append({"sequence": seq, "problem": "hash does not match the entry's fields"})
            prev, expected, last = row["hash"], seq + 1, seq
            result.entries += 1
        if len(chunk) < batch:
            break
        seen = last
    result.head_sequence, result.head_hash = last, prev
    return result


def ledger_verify(*, tenant: Any) -> Verification:
    """Verify the tenant's chain (every problem found, with its sequence number)."""
    return verify(tenant_id=tenant.pk, tenant_slug=tenant.slug)
