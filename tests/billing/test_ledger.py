"""The ledger: the upstream's golden vector, appends and verification, and history nobody can change (ORM, admin,
raw SQL); a row changed behind the triggers' back is found by verification, naming its sequence number."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from apps.billing.models import ImmutableError, LedgerEntry, LedgerHead, triggers
from apps.billing.services import ledger
from tests.factories import make_user

from .conftest import T0
from .ledger_tools import billing_rows, clear_billing_history

pytestmark = pytest.mark.django_db

GOLDEN = {
    "tenant": "acme",
    "sequence": 2,
    "prev_hash": "abc",
    "record_namespace": "tenant-acme",
    "record_name": "usage-1",
    "record_uid": "u1",
    "kind": "gpu",
    "job": "train",
    "sku": "H100",
    "start": "2026-09-03T10:00:00Z",
    "end": "2026-09-03T12:30:00Z",
    "gpu_hours": "5.000000",
    "rate": "2.500000",
    "cost": "12.500000",
    "currency": "USD",
    "recorded_at": "2026-10-01T00:00:00Z",
}


def test_the_upstream_golden_vector():
    assert ledger.hash_input(GOLDEN).count(b"\n") == 16 and not ledger.hash_input(GOLDEN).endswith(b"\n")
    assert ledger.entry_hash(GOLDEN) == "43516e7b3b191a079bd53edfb1138e394a588ee14a9571d316ada1c598da86ac"


def test_canonical_formats():
    assert ledger.decimal6(5) == "5.000000" and ledger.decimal6(Decimal("0.0000005")) == "0.000001"
    assert ledger.rfc3339(dt.datetime(2026, 9, 3, 12, 30, 0, 999, tzinfo=dt.UTC)) == "2026-09-03T12:30:00Z"


def _sealable(tenant, n: int, **kw) -> ledger.Sealable:
    fields = dict(
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        uid=f"00000000-0000-0000-0000-{n:012d}",
        name=f"usage-{n}",
        kind="gpu",
        job="train",
        sku="h100",
        start=T0,
        end=T0 + dt.timedelta(hours=2, minutes=30),
        gpu_hours=Decimal(5),
        rate=Decimal("2.5"),
        cost=Decimal("12.5"),
        currency="USD",
    )
    return ledger.Sealable(**{**fields, **kw})


def _append(tenant, *numbers: int) -> None:
    with transaction.atomic():
        ledger.append([_sealable(tenant, n) for n in numbers], now=T0 + dt.timedelta(days=28))


def test_a_chain_verifies_and_links_each_entry_to_the_one_before(clean_ledger, tenant_a, tenant_b):
    _append(tenant_a, 1, 2)
    _append(tenant_b, 3)
    _append(tenant_a, 4)
    entries = list(LedgerEntry.all_tenants.filter(tenant=tenant_a).order_by("sequence"))
    assert [e.sequence for e in entries] == [1, 2, 3]
    assert entries[0].prev_hash == "" and entries[1].prev_hash == entries[0].hash
    assert entries[2].prev_hash == entries[1].hash and entries[0].cost == "12.500000"
    result = ledger.verify(tenant_id=tenant_a.pk, tenant_slug=tenant_a.slug)
    assert result.valid and result.entries == 3 and result.head_sequence == 3 and result.head_hash == entries[2].hash
    assert LedgerHead.objects.get(tenant=tenant_a).sequence == 3
    assert ledger.verify(tenant_id=tenant_b.pk, tenant_slug=tenant_b.slug).entries == 1  # its own chain


def test_one_append_seals_several_tenants_chains_together(clean_ledger, tenant_a, tenant_b):
    """Records of several tenants in one call (a reconciler pass's): one head lock, one insert and one head move for
    all of them, and each tenant's chain continues from its own head."""
    _append(tenant_b, 1)
    with transaction.atomic():
        later = T0 + dt.timedelta(days=28)
        ledger.append([_sealable(tenant_a, 2), _sealable(tenant_b, 3), _sealable(tenant_a, 4)], now=later)
    heads = {head.tenant_id: head for head in LedgerHead.objects.filter(tenant__in=[tenant_a, tenant_b])}
    for tenant, uids in ((tenant_a, [2, 4]), (tenant_b, [1, 3])):
        entries = list(LedgerEntry.all_tenants.filter(tenant=tenant).order_by("sequence"))
        assert [e.sequence for e in entries] == [1, 2] and [int(e.record_uid[-12:]) for e in entries] == uids
        result = ledger.verify(tenant_id=tenant.pk, tenant_slug=tenant.slug)
        assert result.valid and (heads[tenant.pk].sequence, heads[tenant.pk].hash) == (2, entries[-1].hash)


def test_sealing_the_same_record_twice_fails_instead_of_forking(clean_ledger, tenant_a):
    _append(tenant_a, 1)
    with pytest.raises(IntegrityError):
        _append(tenant_a, 1)
    assert LedgerEntry.all_tenants.count() == 1 and LedgerHead.objects.get(tenant=tenant_a).sequence == 1


def test_the_orm_cannot_change_or_delete_an_entry(clean_ledger, tenant_a):
    _append(tenant_a, 1)
    entry = LedgerEntry.all_tenants.get()
    entry.cost = "0.000000"
    with pytest.raises(ImmutableError):
        entry.save()
    with pytest.raises(ImmutableError):
        entry.delete()
    for change in (lambda qs: qs.update(cost="0.000000"), lambda qs: qs.delete()):
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
            change(LedgerEntry.all_tenants.all())
    assert LedgerEntry.all_tenants.get().cost == "12.500000"


def test_raw_sql_cannot_change_or_delete_an_entry(clean_ledger, tenant_a):
    _append(tenant_a, 1)
    for sql in ("UPDATE billing_ledgerentry SET cost = '0.000000'", "DELETE FROM billing_ledgerentry"):
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic(), connection.cursor() as c:
            c.execute(sql)
    assert LedgerEntry.all_tenants.get().cost == "12.500000"


def test_the_admin_cannot_change_or_delete_an_entry(clean_ledger, tenant_a, client):
    _append(tenant_a, 1)
    entry = LedgerEntry.all_tenants.get()
    admin = make_user("root", staff=True)
    admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    url = f"/admin/billing/ledgerentry/{entry.pk}/"
    assert client.get(url + "change/").status_code == 200  # it can be read
    assert client.post(url + "change/", {"cost": "0.000000"}).status_code == 403
    assert client.post(url + "delete/", {"post": "yes"}).status_code == 403
    changelist = client.post(
        "/admin/billing/ledgerentry/", {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"}
    )
    assert changelist.status_code in (200, 302)
    assert LedgerEntry.all_tenants.get().cost == "12.500000"


def test_a_row_changed_behind_the_triggers_is_found_naming_its_sequence(clean_ledger, tenant_a):
    _append(tenant_a, 1, 2, 3)
    triggers.drop(connection)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE billing_ledgerentry SET cost = '0.000000' WHERE tenant_id = %s AND sequence = 2", [tenant_a.pk]
            )
    finally:
        triggers.create(connection)
    installed = triggers.installed(connection)
    assert installed == triggers.expected(connection) == (4 if connection.vendor == "postgresql" else 9)
    result = ledger.verify(tenant_id=tenant_a.pk, tenant_slug=tenant_a.slug)
    assert not result.valid
    assert result.problems == [{"sequence": 2, "problem": "hash does not match the entry's fields"}]
    with pytest.raises(CommandError, match="1 ledger chain"):
        call_command("verify_ledger", tenant_a.slug)
    with pytest.raises(IntegrityError), transaction.atomic():  # the trigger is back
        LedgerEntry.all_tenants.update(cost="1.000000")


def test_a_deleted_entry_is_a_gap_and_a_broken_link(clean_ledger, tenant_a):
    _append(tenant_a, 1, 2, 3)
    triggers.drop(connection)
    try:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM billing_ledgerentry WHERE tenant_id = %s AND sequence = 2", [tenant_a.pk])
    finally:
        triggers.create(connection)
    problems = ledger.verify(tenant_id=tenant_a.pk, tenant_slug=tenant_a.slug).problems
    assert {p["sequence"] for p in problems} == {3}
    assert any("where 2 was expected" in p["problem"] for p in problems)


def test_the_clean_ledger_fixture_empties_history_and_keeps_the_triggers(tenant_a):
    _append(tenant_a, 1, 2)
    assert billing_rows() > 0
    clear_billing_history()
    assert billing_rows() == 0
    installed = triggers.installed(connection)
    assert installed == triggers.expected(connection) == (4 if connection.vendor == "postgresql" else 9)
    _append(tenant_a, 7)  # a new chain starts at 1
    assert LedgerEntry.all_tenants.get().sequence == 1


def test_the_clean_ledger_fixture_starts_empty(clean_ledger):
    assert billing_rows() == 0


def test_verify_ledger_command_reports_each_tenant(clean_ledger, tenant_a, tenant_b, capsys):
    _append(tenant_a, 1, 2)
    call_command("verify_ledger")
    out = capsys.readouterr().out
    assert "alpha: ok, 2 entries, head 2" in out and "bravo: ok, 0 entries, head 0" in out
    with pytest.raises(CommandError, match="no such tenant"):
        call_command("verify_ledger", "nope")


def test_the_verify_endpoint_is_the_tenants_own(clean_ledger, tenant_a, client_a, client_b, platform_key):
    from tests.factories import client_for

    _append(tenant_a, 1)
    body = client_a.get("/api/v1/ledger/alpha/verify/").json()
    assert body["valid"] and body["entries"] == 1 and body["headSequence"] == 1 and body["hashVersion"] == "v1"
    assert client_b.get("/api/v1/ledger/alpha/verify/").status_code == 404
    assert client_for(platform_key).get("/api/v1/ledger/alpha/verify/").json()["entries"] == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_never_fork_the_chain(tenant_a):
    errors: list[BaseException] = []

    def worker(base: int) -> None:
        try:
            for i in range(10):
                _append(tenant_a, base + i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(100 * (n + 1),)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    result = ledger.verify(tenant_id=tenant_a.pk, tenant_slug=tenant_a.slug)
    assert result.valid and result.entries == 40
