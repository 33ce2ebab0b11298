"""Invoice numbers under concurrent finalization: real threads, each with its own PostgreSQL connection."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

from apps.billing.models import Invoice, InvoiceCounter
from apps.billing.services import invoicing
from tests.factories import ACTOR

from .conftest import make_sku
from .invoice_tools import SEPT, event, ingest

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _run_together(work, items) -> list[BaseException]:
    """Run `work(item)` for each item in its own thread, all released at once."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(items))

    def worker(item) -> None:
        try:
            barrier.wait()
            work(item)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


def test_eight_concurrent_finalizations_take_numbers_one_to_eight(tenant_a):
    make_sku()
    days = [SEPT + dt.timedelta(days=n) for n in range(8)]
    ingest(tenant_a, *[event(day, 3600) for day in days])
    drafts = [
        invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=day, end=day + dt.timedelta(days=1))
        for day in days
    ]
    errors = _run_together(lambda draft: invoicing.invoice_finalize(actor=ACTOR, invoice=draft), drafts)
    assert not errors
    invoices = Invoice.all_tenants.filter(tenant=tenant_a)
    assert sorted(invoices.values_list("sequence", flat=True)) == list(range(1, 9))
    assert sorted(invoices.values_list("number", flat=True)) == [f"INV-alpha-{n:06d}" for n in range(1, 9)]
    assert set(invoices.values_list("state", flat=True)) == {"finalized"}
    assert InvoiceCounter.objects.get(tenant=tenant_a).last == 8


def test_the_same_draft_finalized_twice_at_once_is_numbered_once(tenant_a):
    make_sku()
    ingest(tenant_a, event(SEPT, 3600))
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=SEPT, end=SEPT + dt.timedelta(days=30))
    errors = _run_together(lambda _n: invoicing.invoice_finalize(actor=ACTOR, invoice=draft), range(4))
    assert len(errors) == 3 and all(isinstance(e, invoicing.InvoiceConflict) for e in errors)
    assert all("only a draft can be finalized" in str(e) for e in errors)
    assert Invoice.all_tenants.get(pk=draft.pk).number == "INV-alpha-000001"
    assert InvoiceCounter.objects.get(tenant=tenant_a).last == 1


def test_a_refused_finalization_meanwhile_leaves_no_gap(tenant_a):
    make_sku()
    ingest(tenant_a, *[event(SEPT + dt.timedelta(days=n), 3600) for n in range(3)])
    good = [
        invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=SEPT + dt.timedelta(days=n),
                                 end=SEPT + dt.timedelta(days=n + 1))
        for n in range(3)
    ]  # fmt: skip
    empty = [
        invoicing.invoice_create(actor=ACTOR, tenant=tenant_a, start=SEPT + dt.timedelta(days=10 + n),
                                 end=SEPT + dt.timedelta(days=11 + n))
        for n in range(3)
    ]  # fmt: skip
    errors = _run_together(lambda draft: invoicing.invoice_finalize(actor=ACTOR, invoice=draft), good + empty)
    assert len(errors) == 3 and all("no ledgered usage" in str(e) for e in errors)
    numbers = Invoice.all_tenants.filter(tenant=tenant_a).exclude(sequence=None).values_list("sequence", flat=True)
    assert sorted(numbers) == [1, 2, 3]
