"""apps.core.db.bulk: many rows in one statement, stored exactly as the ORM stores them (both databases)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.db.bulk import bulk_insert, bulk_set
from apps.jobs.models import Job, JobEvent
from tests.factories import make_tenant
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db

WHEN = dt.datetime(2026, 12, 1, 8, 30, 15, 123456, tzinfo=dt.UTC)


def _jobs(n: int) -> list[Job]:
    tenant = make_tenant()
    return [make_job(tenant) for _ in range(n)]


def test_bulk_set_writes_each_rows_values_in_one_statement():
    a, b, c = _jobs(3)
    rows = {
        a.pk: {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "start_time": WHEN},
        b.pk: {"phase": "Failed", "message": 'it\'s "quoted"; {braces}, commas', "placement": None},
        c.pk: {"gpus_allocated": 4, "admitted_borrowing": True, "request": {"nvidia.com/gpu": 4}},
    }
    with CaptureQueriesContext(connection) as queries:
        written = bulk_set(Job, rows)
    assert written == {a.pk, b.pk, c.pk}
    assert len(queries) == 1
    a2, b2, c2 = (Job.all_tenants.get(pk=j.pk) for j in (a, b, c))
    assert (a2.phase, a2.conditions, a2.start_time) == ("Running", [{"type": "Ready", "status": "True"}], WHEN)
    assert (b2.phase, b2.message, b2.placement) == ("Failed", 'it\'s "quoted"; {braces}, commas', None)
    assert (c2.gpus_allocated, c2.admitted_borrowing, c2.request) == (4, True, {"nvidia.com/gpu": 4})
    # Columns a row did not name keep their values.
    assert (a2.message, b2.start_time, c2.phase) == (a.message, None, c.phase)


def test_bulk_set_statement_text_does_not_grow_with_the_rows():
    jobs = _jobs(6)
    texts = []
    for chunk in (jobs[:2], jobs[2:]):
        with CaptureQueriesContext(connection) as queries:
            bulk_set(Job, {j.pk: {"reason": f"r{j.pk}"} for j in chunk})
        texts.append(queries[0]["sql"])
    if connection.vendor == "postgresql":  # the rows' JSON is rendered into the logged SQL; the template is fixed
        templates = [re.sub(r"'\[.*\]'::json", "?", text) for text in texts]
        templates = [re.sub(r"ANY\(.*?::bigint\[\]\)", "ANY(?)", text) for text in templates]  # and the keys
        assert templates[0] == templates[1] and "json_to_recordset(?)" in templates[0], templates
    assert [j.reason for j in Job.all_tenants.filter(pk__in=[j.pk for j in jobs]).order_by("pk")] == [
        f"r{j.pk}" for j in jobs
    ]


def test_bulk_set_compare_and_swap_and_exclude_leave_rows_whole():
    a, b, c = _jobs(3)
    Job.all_tenants.filter(pk=b.pk).update(generation=7)
    Job.all_tenants.filter(pk=c.pk).update(phase="Succeeded")
    rows = {j.pk: {"observed_generation": 5, "reason": "Seen"} for j in (a, b, c)}
    written = bulk_set(
        Job, rows, when={a.pk: {"generation": a.generation}, b.pk: {"generation": 5}}, exclude={"phase": ["Succeeded"]}
    )
    assert written == {a.pk}  # b's generation moved on (the swap fails), c is excluded by its phase
    got = {j.pk: (j.observed_generation, j.reason) for j in Job.all_tenants.filter(pk__in=[a.pk, b.pk, c.pk])}
    assert got[a.pk] == (5, "Seen")
    assert got[b.pk] == (b.observed_generation, b.reason)
    assert got[c.pk] == (c.observed_generation, c.reason)


def test_bulk_insert_fills_defaults_and_stores_values_like_the_orm():
    (job,) = _jobs(1)
    JobEvent.objects.filter(job=job).delete()
    with CaptureQueriesContext(connection) as queries:
        count = bulk_insert(
            JobEvent,
            [
                {"job_id": job.pk, "reason": "Started", "message": "a\nb 'c' {d}"},
                {"job_id": job.pk, "reason": "Warned", "type": "Warning"},
            ],
        )
    assert count == 2
    assert len(queries) == 1
    events = list(JobEvent.objects.filter(job=job).order_by("id"))
    assert [(e.reason, e.type, e.message) for e in events] == [
        ("Started", "Normal", "a\nb 'c' {d}"),
        ("Warned", "Warning", ""),
    ]
    assert all(e.created_at is not None and e.created_at.tzinfo is not None for e in events)


def test_bulk_insert_refuses_a_row_missing_a_required_field():
    (job,) = _jobs(1)
    with pytest.raises(ValueError, match="JobEvent.reason has no default"):
        bulk_insert(JobEvent, [{"job_id": job.pk}])
    assert bulk_insert(JobEvent, []) == 0


def test_bulk_set_keeps_json_null_and_reads_back_every_value_type():
    """JSON None stays JSON null (a NOT NULL JSON column takes it), nested structures and non-ASCII text round-trip,
    datetimes keep their instant, and a compare-and-swap on a datetime column works."""
    a, b = _jobs(2)
    Job.all_tenants.filter(pk=b.pk).update(start_time=WHEN)
    rows = {
        a.pk: {"placement": None, "spec": {**a.spec, "note": "héllo ✓ 'q' \"d\" \\ \n"}, "message": "ünïcode"},
        b.pk: {"completion_time": WHEN + dt.timedelta(hours=1), "conditions": [{"a": [1, 2.5, None, True]}]},
    }
    written = bulk_set(Job, rows, when={b.pk: {"start_time": WHEN}})
    assert written == {a.pk, b.pk}
    a2, b2 = Job.all_tenants.get(pk=a.pk), Job.all_tenants.get(pk=b.pk)
    assert a2.placement is None and a2.spec["note"] == "héllo ✓ 'q' \"d\" \\ \n" and a2.message == "ünïcode"
    assert b2.completion_time == WHEN + dt.timedelta(hours=1) and b2.conditions == [{"a": [1, 2.5, None, True]}]
    assert Job.all_tenants.filter(pk=a.pk, placement__isnull=True).count() == 0  # JSON null, not SQL NULL
    assert bulk_set(Job, {b.pk: {"message": "late"}}, when={b.pk: {"start_time": WHEN - dt.timedelta(1)}}) == set()


def test_bulk_insert_stores_json_values_as_the_orm_does():
    """JSON columns (encoded by orjson for COPY on PostgreSQL) read back equal: objects, lists, strings, numbers,
    non-ASCII text; None is JSON null on both databases; a value JSON cannot hold is refused, naming its type."""
    from apps.core.models import AuditEntry

    values = [{"a": [1, 2.5, None, True], "é": "✓ 'q' \"d\" \\ \n"}, ["x", {"n": 2**62}], "just text", 7, None]
    rows = [
        {"action": f"t.{i}", "object_type": "job", "object_id": str(i), "actor": "test", "after": value}
        for i, value in enumerate(values)
    ]
    assert bulk_insert(AuditEntry, rows) == len(values)
    stored = dict(AuditEntry.all_tenants.filter(action__startswith="t.").values_list("action", "after"))
    assert [stored[f"t.{i}"] for i in range(len(values))] == values
    assert not AuditEntry.all_tenants.filter(action="t.4", after__isnull=True).exists()  # JSON null, not SQL NULL
    with pytest.raises(TypeError, match="set"):
        bulk_insert(AuditEntry, [{**rows[0], "after": {"s": {1}}}])
