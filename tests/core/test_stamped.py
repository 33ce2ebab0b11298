"""apps.core.db.stamped: a row's columns travel only when the row changed since the previous read."""

from __future__ import annotations

import pytest
from django.db import connection

from apps.core.db import stamped
from apps.core.db.stamped import StampedRows
from apps.tenants.models import Tenant
from tests.factories import make_tenant

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="xmin is PostgreSQL's"),
]
SQL = (
    f"SELECT t.id, {stamped.stamp('t')}, {stamped.known()}, {stamped.fresh_only(['t.slug', 't.display_name'])}, "
    f"t.max_gpus FROM tenants_tenant AS t {stamped.join('t')} WHERE t.id = ANY(%s) ORDER BY t.id"
)


def _read(rows: StampedRows, ids: list[int], built: list) -> tuple[list[tuple], list[tuple]]:
    """(what came back, as fetched), (the objects with the rest of each row)."""
    params, finish = rows.read(lambda pk, slug, name: built.append(pk) or (pk, slug, name), width=2)
    with connection.cursor() as cursor:
        cursor.execute(SQL, [*params, ids])
        fetched = cursor.fetchall()
    return fetched, finish(fetched)


def test_unchanged_rows_come_back_without_their_columns_and_keep_what_was_built():
    a, b = make_tenant("stamp-a"), make_tenant("stamp-b")
    rows: StampedRows[tuple] = StampedRows()
    built: list[int] = []
    fetched, out = _read(rows, [a.pk, b.pk], built)
    assert [r[2] for r in fetched] == [False, False] and built == [a.pk, b.pk]
    first = [obj for obj, _gpus in out]
    assert first == [(a.pk, "stamp-a", a.display_name), (b.pk, "stamp-b", b.display_name)]

    fetched, out = _read(rows, [a.pk, b.pk], built)
    assert [r[2:5] for r in fetched] == [(True, None, None), (True, None, None)]  # no column sent
    assert [obj for obj, _ in out] == first and all(x is y for x, y in zip((o for o, _ in out), first, strict=True))
    assert built == [a.pk, b.pk]  # nothing built again
    assert [gpus for _obj, gpus in out] == [a.max_gpus, b.max_gpus]  # columns outside the stamped ones: always

    # A write by anyone (here raw SQL) is a new row version: that row, and only it, comes back whole.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE tenants_tenant SET display_name = 'renamed' WHERE id = %s", [b.pk])
    fetched, out = _read(rows, [a.pk, b.pk], built)
    assert [r[2] for r in fetched] == [True, False] and built == [a.pk, b.pk, b.pk]
    assert out[1][0] == (b.pk, "stamp-b", "renamed")


def test_a_row_left_out_of_a_read_is_forgotten_and_built_again_when_it_returns():
    a, b = make_tenant("stamp-c"), make_tenant("stamp-d")
    rows: StampedRows[tuple] = StampedRows()
    built: list[int] = []
    _read(rows, [a.pk, b.pk], built)
    _read(rows, [a.pk], built)
    fetched, _out = _read(rows, [a.pk, b.pk], built)
    assert [r[2] for r in fetched] == [True, False] and built == [a.pk, b.pk, b.pk]


def test_reads_made_before_the_previous_one_finished_use_their_own_memo():
    tenant = make_tenant("stamp-e")
    rows: StampedRows[tuple] = StampedRows()
    built: list[int] = []
    _read(rows, [tenant.pk], built)
    params, finish = rows.read(lambda pk, slug, name: (pk, slug, name), width=2)  # made, not yet fetched
    Tenant.objects.filter(pk=tenant.pk).update(display_name="meanwhile")
    _read(rows, [tenant.pk], built)  # another read replaces the memo in between
    with connection.cursor() as cursor:
        cursor.execute(SQL, [*params, [tenant.pk]])
        assert finish(cursor.fetchall())[0][0] == (tenant.pk, "stamp-e", "meanwhile")
