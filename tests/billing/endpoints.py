"""Contract registrations for /api/v1/invoices/ (read-only for tenants: the platform creates and finalizes them)
and /api/v1/budgets/ (read with billing:read, written with billing:write)."""

import datetime as dt
import itertools
from decimal import Decimal

from apps.billing import services
from apps.billing.models import Budget, Invoice
from apps.billing.services import invoicing
from tests.api_contract import Endpoint, register
from tests.factories import ACTOR

_days = itertools.count(0)
_FIRST = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def make_invoice(tenant) -> str:
    """A finalized invoice of a day of its own, with one ledgered event in it (tenants do not see drafts)."""
    start = _FIRST + dt.timedelta(days=next(_days))
    end = start + dt.timedelta(days=1)
    event = {
        "id": f"contract-{start:%Y%m%d}",
        "start": start.isoformat(),
        "end": (start + dt.timedelta(hours=1)).isoformat(),
    }
    services.usage_events_ingest(tenant=tenant, events=[event])
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant, start=start, end=end)
    return str(invoicing.invoice_finalize(actor=ACTOR, invoice=draft).pk)


register(
    Endpoint(
        name="invoices",
        model=Invoice,
        list_path=lambda t: "/api/v1/invoices/",
        detail_path=lambda t, i: f"/api/v1/invoices/{i}/",
        make=make_invoice,
        read_scope="billing:read",
    )
)

_names = itertools.count(1)


def make_budget(tenant) -> str:
    return services.budget_create(actor=ACTOR, tenant=tenant, name=f"budget{next(_names)}", amount=Decimal(100)).name


register(
    Endpoint(
        name="budgets",
        model=Budget,
        list_path=lambda t: "/api/v1/budgets/",
        detail_path=lambda t, i: f"/api/v1/budgets/{i}/",
        make=make_budget,
        read_scope="billing:read",
        write_scope="billing:write",
        create_payload=lambda t: {"name": f"contract{next(_names)}", "amount": "250", "hard_limit": True},
        update_payload={"amount": "300", "thresholds": [75, 100]},
        deletes=True,
        read_only_scopes=["billing:read"],
        id_field=("name",),
    )
)
