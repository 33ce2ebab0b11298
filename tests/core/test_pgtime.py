"""apps.core.db.pgtime: PostgreSQL timestamps parsed by psycopg's C loader, with the values Django's loader gives."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from apps.core.db import pgtime
from apps.core.models import AuditEntry

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL connection's loaders")


def _loader():
    from psycopg.pq import Format

    connection.ensure_connection()
    oid = connection.connection.adapters.types["timestamptz"].oid
    return connection.connection.adapters.get_loader(oid, Format.TEXT)


@pytest.mark.django_db
def test_connections_read_timestamps_with_the_fast_loader():
    psycopg_c = pgtime.fast_loader(connection.timezone)
    if psycopg_c is None:
        pytest.skip("psycopg's C implementation is not installed")
    assert _loader() is psycopg_c
    with connection.cursor() as cursor:  # Django keeps it: its timezone is the connection's
        cursor.execute("SELECT %s::timestamptz", ["2026-12-04 06:07:08.123456+01"])
        (value,) = cursor.fetchone()
    assert value == dt.datetime(2026, 12, 4, 5, 7, 8, 123456, tzinfo=dt.UTC)
    assert value.utcoffset() == dt.timedelta(0) and value.tzinfo is connection.timezone


@pytest.mark.django_db
def test_values_read_equal_those_of_djangos_loader():
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader

    fast_class = pgtime.fast_loader(connection.timezone)
    if fast_class is None:
        pytest.skip("psycopg's C implementation is not installed")

    class DjangoLoader(BaseTzLoader):
        timezone = connection.timezone

    connection.ensure_connection()
    oid = connection.connection.adapters.types["timestamptz"].oid
    fast, slow = fast_class(oid, connection.connection), DjangoLoader(oid, connection.connection)
    for text in (b"2026-12-04 05:07:08+00", b"1999-01-01 00:00:00.5+00", b"2026-06-30 23:59:59.999999+00"):
        assert fast.load(text) == slow.load(text) and fast.load(text).tzinfo is slow.load(text).tzinfo
    # Through the ORM: a row's timestamp round-trips.
    moment = dt.datetime(2026, 3, 29, 1, 30, 0, 250000, tzinfo=dt.UTC)
    entry = AuditEntry.all_tenants.create(action="test.pgtime", object_type="t", object_id="1", actor="test")
    AuditEntry.all_tenants.filter(pk=entry.pk).update(created_at=moment)
    assert AuditEntry.all_tenants.get(pk=entry.pk).created_at == moment
