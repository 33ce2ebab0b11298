"""apps.core.db.json_rows: a batch of rows inserted as one JSON parameter stores exactly what COPY stores, in one
statement, and hands the batch back to COPY whenever a value would not travel exactly."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.billing.models import UsageRecord
from apps.core.db import json_rows
from apps.core.db.bulk import bulk_insert, copy_insert_rows
from apps.core.models import AuditEntry
from apps.llm.models import LlmUsage
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the JSON path is PostgreSQL's")

WHEN = dt.datetime(2026, 12, 1, 8, 30, 15, 123456, tzinfo=dt.UTC)
COLUMNS = (
    "tenant_id", "uid", "name", "kind", "job_pk", "job_uid", "job_name", "run", "queue_name", "model", "input_tokens",
    "output_tokens", "sku_id", "sku_name", "gpu_type", "gpus", "reserved_gpus", "cpu_cores", "memory_gib", "start",
    "end", "gpu_hours", "rate", "cost", "currency", "final", "refreshed_at", "created_at",
)  # fmt: skip
READ = tuple(c for c in COLUMNS if c not in ("uid", "job_uid"))  # (unique: each batch has its own)


def _records(tenant_id: int, prefix: str) -> list[tuple]:
    text = "héllo ✓ 'q' \"d\" \\ \n\t{x}"
    base = 100 if prefix == "copy" else 0
    return [
        (
            tenant_id, uuid.uuid4(), f"{prefix}-{i}", "gpu", 2**62 + i if i == 1 else i,
            uuid.UUID(int=i + base) if i else None, text if i == 2 else f"job-{i}", i + 1, "", "", 0, 2**40, None, "",
            "H100", i, 0, Decimal("12.345"), Decimal("0.001") * i, WHEN + dt.timedelta(microseconds=i),
            None if i else WHEN, Decimal("1.234567"), Decimal("2.5"), Decimal("-0.000001"), "USD",
            True,  # final (one open record a job)
            WHEN.astimezone(dt.timezone(dt.timedelta(hours=5))), WHEN,
        )
        for i in range(4)
    ]  # fmt: skip


def _stored(prefix: str) -> list[tuple]:
    rows = UsageRecord.all_tenants.filter(name__startswith=f"{prefix}-").order_by("id")
    return [(name.split("-", 1)[1], *rest) for name, *rest in rows.values_list("name", *READ[2:])]


def test_rows_read_back_as_copy_stores_them_in_one_insert(monkeypatch):
    tenant = make_tenant()
    with CaptureQueriesContext(connection) as queries:
        assert copy_insert_rows(UsageRecord, COLUMNS, _records(tenant.pk, "json")) == 4
    assert len(queries) == 1
    if connection.vendor == "postgresql":
        assert queries[0]["sql"].startswith('INSERT INTO "billing_usagerecord"')
    monkeypatch.setattr(json_rows, "MAX_ROWS", 0)  # every batch goes through COPY (PostgreSQL)
    with CaptureQueriesContext(connection) as queries:
        copy_insert_rows(UsageRecord, COLUMNS, _records(tenant.pk, "copy"))
    if connection.vendor == "postgresql":
        assert [q["sql"].split()[0] for q in queries] == ["COPY"]
    assert _stored("json") == _stored("copy")
    stored = _stored("json")
    assert [row[0] for row in stored] == ["0", "1", "2", "3"]  # in the order given
    assert stored[2][3] == "héllo ✓ 'q' \"d\" \\ \n\t{x}" and stored[1][2] == 2**62 + 1
    assert stored[0][17] == WHEN and stored[1][17] is None and stored[0][16] == WHEN  # instants, NULL
    assert stored[3][15] == Decimal("0.003") and stored[0][20] == Decimal("-0.000001")
    assert stored[0][23] == WHEN and stored[0][22] is True
    job_uids = UsageRecord.all_tenants.filter(name__startswith="json-").order_by("id").values_list("job_uid", flat=True)
    assert list(job_uids) == [None, uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)]


def test_json_columns_keep_json_null_and_values_beyond_64_bits(monkeypatch):
    values = [{"a": [1, 2.5, None, True], "é": "✓"}, None, {"big": 2**70}, "text", [{"n": -(2**63)}]]
    for path in ("json", "copy"):
        if path == "copy":
            monkeypatch.setattr(json_rows, "MAX_ROWS", 0)
        rows = [
            {"action": f"{path}.{i}", "object_type": "job", "object_id": str(i), "actor": "test", "after": value}
            for i, value in enumerate(values)
        ]
        assert bulk_insert(AuditEntry, rows) == len(values)
        stored = dict(AuditEntry.all_tenants.filter(action__startswith=f"{path}.").values_list("action", "after"))
        assert [stored[f"{path}.{i}"] for i in range(len(values))] == values
        assert not AuditEntry.all_tenants.filter(action=f"{path}.1", after__isnull=True).exists()  # JSON null


@postgresql_only
def test_a_value_json_would_not_carry_exactly_hands_the_batch_to_copy():
    tenant = make_tenant()
    fields = [f for f in LlmUsage._meta.concrete_fields if not f.primary_key]
    given = {"tenant_id": tenant.pk, "key_id": "k", "model": "m", "endpoint": "chat.completions", "status": 200}

    def row(request_id: str, **values) -> list:
        values = {"request_id": request_id, **given, "created_at": WHEN, **values}
        return [values[f.attname] if f.attname in values else f.get_default() for f in fields]

    with CaptureQueriesContext(connection) as queries:
        assert json_rows.insert_json_rows(LlmUsage._meta, fields, [row("r-1", latency_ms=math.nan)]) is False
        assert json_rows.insert_json_rows(LlmUsage._meta, fields, [row("r-1", model={1, 2})]) is False  # a set
    assert queries.captured_queries == [] and not LlmUsage.objects.exists()  # nothing written
    assert json_rows.insert_json_rows(LlmUsage._meta, fields, [row("r-1", latency_ms=1.5)]) is True
    assert LlmUsage.objects.get(request_id="r-1").latency_ms == 1.5
    too_many = [row(f"r-{i}") for i in range(2, json_rows.MAX_ROWS + 3)]
    assert json_rows.insert_json_rows(LlmUsage._meta, fields, too_many) is False
    # bulk_insert then COPYs the batch: NaN is stored as NaN.
    bulk_insert(LlmUsage, [{**given, "request_id": "r-nan", "created_at": WHEN, "latency_ms": math.nan}])
    assert math.isnan(LlmUsage.objects.get(request_id="r-nan").latency_ms)


@postgresql_only  # (SQLite does not enforce a column's length)
def test_a_value_too_long_for_its_column_is_refused_and_nothing_is_written():
    tenant = make_tenant()
    rows = _records(tenant.pk, "long")
    rows[3] = (*rows[3][:24], "USDX", *rows[3][25:])  # currency is varchar(3): no silent truncation
    with pytest.raises(DataError), transaction.atomic():
        copy_insert_rows(UsageRecord, COLUMNS, rows)
    assert _stored("long") == []
