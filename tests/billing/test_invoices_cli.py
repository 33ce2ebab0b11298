"""`gryvia invoices`, `gryvia cost-centers` and `gryvia chargeback` against the real app (live server)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from apps.billing.models import Invoice
from tests.cli.conftest import Run, cli  # noqa: F401 - the fixture
from tests.factories import make_key, make_tenant

from .conftest import make_sku
from .invoice_tools import SEPT, event, ingest


@pytest.mark.django_db(transaction=True)
def test_invoices_and_chargeback_round_trip(live_server, cli: Run):  # noqa: F811
    tenant = make_tenant("cli-inv")
    platform = make_key(tenant, ["admin"], platform=True)
    reader = make_key(tenant, ["billing:read"])
    make_sku()
    ingest(tenant, event(SEPT, 5400, gpus=2))
    base = ("--url", live_server.url)
    admin = (*base, "--api-key", platform)

    estimate = cli(*admin, "--tenant", "cli-inv", "invoices", "estimate", "--month", "2026-09", "-o", "json")
    assert estimate.code == 0, estimate.err
    assert json.loads(estimate.out)["subtotal"] == "7.50"
    exported = cli(*base, "--api-key", reader, "invoices", "estimate", "--month", "2026-09", "--csv")
    assert list(csv.DictReader(io.StringIO(exported.out)))[-1]["amount"] == "7.50"

    refused = cli(*base, "--api-key", reader, "--tenant", "cli-inv", "invoices", "create", "--month", "2026-09")
    assert refused.code == 1 and "billing:write" in refused.err
    created = cli(*admin, "--tenant", "cli-inv", "invoices", "create", "--month", "2026-09", "--finalize")
    assert created.code == 0, created.err
    assert "invoice INV-cli-inv-000001 finalized" in created.out and "total: 7.50 USD" in created.out

    listed = cli(*base, "--api-key", reader, "invoices", "list")
    assert listed.code == 0 and listed.out.splitlines()[1].split()[1:4] == [
        "INV-cli-inv-000001",
        "cli-inv",
        "finalized",
    ]
    shown = cli(*base, "--api-key", reader, "invoices", "show", "INV-cli-inv-000001", "--html")
    assert shown.code == 0 and "Invoice INV-cli-inv-000001" in shown.out

    centers = cli(*admin, "cost-centers", "create", "ml", "--name", "ML", "--overhead", "10", "--tenants", "cli-inv")
    assert centers.code == 0 and "costcenter/ml created" in centers.out, centers.err
    report = cli(*admin, "chargeback", "--month", "2026-09")
    assert report.code == 0, report.err
    assert report.out.splitlines()[1].split() == ["ml", "cli-inv", "INV-cli-inv-000001", "7.50", "0.75", "8.25", "USD"]
    assert "total: 8.25 USD (7.50 invoiced + 0.75 overhead)" in report.out

    voided = cli(*admin, "invoices", "void", "INV-cli-inv-000001", "--reason", "re-issue")
    assert voided.code == 0 and "invoice INV-cli-inv-000001 void" in voided.out, voided.err
    again = cli(*admin, "invoices", "finalize", "INV-cli-inv-000001")
    assert again.code == 1 and "only a draft can be finalized" in again.err
    assert Invoice.all_tenants.get().state == "void"
