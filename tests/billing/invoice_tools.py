"""Helpers for the invoice and chargeback tests: ledgered usage in a period, and the ledger summed independently."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import ROUND_HALF_UP, Decimal

from apps.billing import services
from apps.billing.models import LedgerEntry

SEPT = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
_ids = itertools.count(1)


def event(start: dt.datetime, seconds: int, **kw) -> dict:
    """An external usage event of `seconds` from `start` (1 H100 unless told otherwise)."""
    end = start + dt.timedelta(seconds=seconds)
    fields = {"gpu_type": "H100", "gpus": 1, "job": "train", **kw}
    return {"id": f"ev-{next(_ids)}", "start": start.isoformat(), "end": end.isoformat(), **fields}


def ingest(tenant, *events: dict) -> None:
    services.usage_events_ingest(tenant=tenant, events=list(events))


def ledger_lines(tenant, start: dt.datetime, end: dt.datetime) -> dict[tuple[str, str, str], Decimal]:
    """The exact cost per (kind, sku, currency) of the tenant's ledger entries whose start is in [start, end),
    read from the rows themselves (not through apps.billing.services.invoicing)."""
    sums: dict[tuple[str, str, str], Decimal] = {}
    for entry in LedgerEntry.all_tenants.filter(tenant=tenant):
        moment = dt.datetime.fromisoformat(entry.start.replace("Z", "+00:00"))
        if start <= moment < end:
            key = (entry.kind, entry.sku, entry.currency)
            sums[key] = sums.get(key, Decimal(0)) + Decimal(entry.cost)
    return sums


def cents(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
