"""apps.core.db.deferred: writes whose results nobody reads go to the server together, in the order they were made."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.core.db.deferred import atomic_deferred_writes, deferred_writes, execute_or_defer, read_together
from apps.tenants.models import Tenant
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="batches on PostgreSQL only")
RENAME = "UPDATE tenants_tenant SET display_name = %s WHERE id = %s"


def _sent(queries) -> list[str]:
    return [q["sql"] for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


def _name(tenant) -> str:
    return Tenant.objects.values_list("display_name", flat=True).get(pk=tenant.pk)


def test_outside_a_block_a_write_runs_at_once_and_gives_its_row_count():
    tenant = make_tenant()
    assert execute_or_defer(RENAME, ["now", tenant.pk]) == 1
    assert _name(tenant) == "now"


@postgresql_only
def test_kept_writes_go_in_one_execute_before_the_next_statement_which_sees_them():
    a, b = make_tenant(), make_tenant()
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), deferred_writes():
        assert execute_or_defer(RENAME, ["first", a.pk]) is None
        assert execute_or_defer(RENAME, ["second", b.pk]) is None
        execute_or_defer(RENAME, ["again 50%", a.pk])  # (a literal % in a value is a parameter, not a placeholder)
        assert not _sent(queries)  # nothing sent yet
        seen = sorted(Tenant.objects.filter(pk__in=[a.pk, b.pk]).values_list("display_name", flat=True))
        assert seen == ["again 50%", "second"]  # the read came after the writes, and saw them in their order
        execute_or_defer(RENAME, ["last", b.pk])  # sent when the block ends
    sql = _sent(queries)
    # The three kept writes and the read: one execute, whose result is the read's; then the last write.
    assert len(sql) == 2 and sql[0].count("UPDATE tenants_tenant") == 3 and "SELECT" in sql[0]
    assert "'last'" in sql[1] and (_name(a), _name(b)) == ("again 50%", "last")


@postgresql_only
def test_the_next_statement_reports_its_own_result_and_row_count():
    a, b = make_tenant(), make_tenant()
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), deferred_writes():
        execute_or_defer(RENAME, ["kept", a.pk])
        with connection.cursor() as cursor:
            cursor.execute("UPDATE tenants_tenant SET display_name = %s WHERE id = ANY(%s)", ["both", [a.pk, b.pk]])
            assert cursor.rowcount == 2  # its own count, not the kept write's 1
        execute_or_defer(RENAME, ["kept again", a.pk])
        created = Tenant.objects.create(slug="made-in-block", display_name="x")  # an INSERT … RETURNING
        assert created.pk and Tenant.objects.filter(pk=created.pk).exists()
    assert len(_sent(queries)) == 3 and _name(a) == "kept again" and _name(b) == "both"


@postgresql_only
def test_statements_the_driver_does_not_bind_get_the_kept_writes_in_an_execute_of_their_own():
    tenant = make_tenant()
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), deferred_writes():
        execute_or_defer(RENAME, ["kept", tenant.pk])
        with connection.cursor() as cursor:
            cursor.execute("SELECT '100%'")  # no parameters: its text is sent as it is, a `%` included
            assert cursor.fetchone() == ("100%",)
        execute_or_defer(RENAME, ["kept again", tenant.pk])
        # A named (server-side) cursor's statement is declared as a cursor: one statement only.
        assert [t.display_name for t in Tenant.objects.filter(pk=tenant.pk).iterator(chunk_size=10)] == ["kept again"]
    sql = _sent(queries)
    assert sql[0].startswith("UPDATE") and sql[1] == "SELECT '100%'" and sql[2].startswith("UPDATE")
    assert _name(tenant) == "kept again"


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_block_that_opens_the_transaction_sends_its_last_writes_with_the_commit():
    from psycopg.pq import TransactionStatus

    tenant = make_tenant()
    with CaptureQueriesContext(connection) as queries:
        with atomic_deferred_writes():
            Tenant.objects.filter(pk=tenant.pk).count()
            execute_or_defer(RENAME, ["committed", tenant.pk])
    # (Django logs its own BEGIN and COMMIT; psycopg finds the transaction committed and sends no second COMMIT.)
    sql = [q for q in _sent(queries) if q not in ("BEGIN", "COMMIT")]
    assert len(sql) == 2 and sql[1].endswith(";\nCOMMIT")
    assert connection.connection.pgconn.transaction_status == TransactionStatus.IDLE and connection.get_autocommit()
    assert _name(tenant) == "committed"
    # A failing last write: nothing of the block stays, and the connection goes on.
    with pytest.raises(DatabaseError), atomic_deferred_writes():
        execute_or_defer(RENAME, ["never", tenant.pk])
        execute_or_defer("UPDATE tenants_tenant SET max_gpus = %s WHERE id = %s", [-1, tenant.pk])  # a CHECK fails
    assert _name(tenant) == "committed" and connection.get_autocommit()
    # Inside a transaction someone else opened, the block does not commit it.
    with pytest.raises(RuntimeError), transaction.atomic():
        with CaptureQueriesContext(connection) as inner, atomic_deferred_writes():
            execute_or_defer(RENAME, ["rolled back", tenant.pk])
        assert not any(q.endswith("COMMIT") for q in _sent(inner))
        raise RuntimeError("the outer block fails")
    assert _name(tenant) == "committed"


def test_an_exception_leaving_the_block_drops_what_it_kept():
    tenant = make_tenant()
    with pytest.raises(RuntimeError), transaction.atomic(), deferred_writes():
        execute_or_defer(RENAME, ["never", tenant.pk])
        raise RuntimeError("the pass failed")
    assert _name(tenant) == ""
    with transaction.atomic(), deferred_writes():  # the next block starts empty
        with deferred_writes():  # a block inside another joins it
            execute_or_defer(RENAME, ["inner", tenant.pk])
    assert _name(tenant) == "inner"


@postgresql_only
def test_an_error_in_a_kept_write_is_raised_by_the_statement_that_sends_it_and_nothing_stays():
    tenant = make_tenant()
    with pytest.raises(DatabaseError), transaction.atomic(), deferred_writes():
        execute_or_defer(RENAME, ["kept", tenant.pk])
        execute_or_defer("UPDATE tenants_tenant SET max_gpus = %s WHERE id = %s", [-1, tenant.pk])  # a CHECK fails
        Tenant.objects.count()
    assert _name(tenant) == ""


def test_reads_together_carry_the_kept_writes_before_them_in_one_round_trip():
    a, b = make_tenant(), make_tenant()
    names = "SELECT display_name FROM tenants_tenant WHERE id = ANY(%s) ORDER BY id"
    if connection.vendor != "postgresql":
        names = "SELECT display_name FROM tenants_tenant WHERE id IN (%s, %s) ORDER BY id"
    ids = [[a.pk, b.pk]] if connection.vendor == "postgresql" else [a.pk, b.pk]
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), deferred_writes():
        execute_or_defer(RENAME, ["x", a.pk])
        execute_or_defer(RENAME, ["y", b.pk])
        first, second = read_together([(names, ids), ("SELECT count(*) FROM tenants_tenant WHERE id = %s", [a.pk])])
    assert first == [("x",), ("y",)] and second == [(1,)]
    if connection.vendor == "postgresql":
        assert len(_sent(queries)) == 1  # the two writes and the two reads: one execute
