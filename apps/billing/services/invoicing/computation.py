"""Computing an invoice of a period from the ledger: lines, rounding, and the checks of finalization.

A period [start, end) holds the usage whose start lies in it (as the usage report counts it). Its lines are the
tenant's ledger entries whose `start` is in the period, grouped by kind and SKU (tokens: by model) and currency:
`amount_exact` is the exact sum of the entries' `cost` strings, `amount` that rounded half-up to the currency's
minor units (2 for USD and EUR), and the subtotal the sum of the rounded line amounts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Sum

from apps.core.errors import Conflict

from ...choices import InvoiceState, UsageKind
from ...models import Invoice, LedgerEntry, UsageRecord
from .. import ledger

# ISO 4217 minor units of the currencies that do not have 2.
MINOR_UNITS = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV"), 0),
    **dict.fromkeys(("XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}
KIND_ORDER = (UsageKind.GPU, UsageKind.CPU, "reservation", UsageKind.TOKENS, UsageKind.EXTERNAL)
SAMPLE = 5  # record names quoted in a refusal
CHUNK = 5000


class InvoiceConflict(Conflict):
    """The invoice's state, or the period's usage, does not allow the change (409)."""


def minor_units(currency: str) -> int:
    return MINOR_UNITS.get(currency, 2)


def round_money(value: Decimal, currency: str) -> Decimal:
    """Half-up to the currency's minor units: 0.025 USD -> 0.03."""
    return value.quantize(Decimal(1).scaleb(-minor_units(currency)), rounding=ROUND_HALF_UP)


def money_text(value: Decimal, currency: str) -> str:
    """`Decimal("12.5")`, USD -> `"12.50"`; JPY -> `"13"`."""
    return f"{round_money(Decimal(value), currency):f}"


@dataclass
class Line:
    """A line being computed (the fields of InvoiceLine)."""

    kind: str
    sku: str
    model: str
    currency: str
    position: int = 0
    entries: int = 0
    gpu_hours: Decimal = Decimal(0)
    input_tokens: int = 0
    output_tokens: int = 0
    rates: set[Decimal] = field(default_factory=set)
    amount_exact: Decimal = Decimal(0)

    @property
    def amount(self) -> Decimal:
        return round_money(self.amount_exact, self.currency)

    @property
    def rate(self) -> Decimal | None:
        if self.kind == UsageKind.TOKENS:
            return None  # priced per million tokens in and out, not per GPU-hour
        if len(self.rates) == 1:
            return next(iter(self.rates))
        return ledger_q6(self.amount_exact / self.gpu_hours) if self.gpu_hours else None

    @property
    def description(self) -> str:
        if self.kind == UsageKind.TOKENS:
            return f"LLM tokens, model {self.model or 'unknown'}"
        what = {
            UsageKind.GPU: "GPU-hours",
            UsageKind.CPU: "CPU jobs",
            UsageKind.EXTERNAL: "External usage",
            "reservation": "Reserved GPU-hours",
        }
        return f"{what.get(self.kind, self.kind)}, SKU {self.sku or 'none (unpriced)'}"


def ledger_q6(value: Decimal) -> Decimal:
    return Decimal(ledger.decimal6(value))


@dataclass
class Computation:
    """What an invoice of `tenant` for [start, end) holds now, and what would stop finalizing it."""

    tenant: Any
    start: dt.datetime
    end: dt.datetime
    lines: list[Line]
    ledger_entries: int
    ledger_first_sequence: int | None
    ledger_last_sequence: int | None
    ledger_totals: dict[str, Decimal]
    open_records: list[str]
    open_count: int
    unledgered_records: list[str]
    unledgered_count: int
    overlapping: list[Invoice]

    @property
    def currencies(self) -> list[str]:
        return sorted({line.currency for line in self.lines})

    @property
    def currency(self) -> str:
        return self.currencies[0] if len(self.currencies) == 1 else ""

    @property
    def totals(self) -> list[dict[str, Any]]:
        """Per currency: the subtotal (sum of rounded lines) and the exact ledger total."""
        return [
            {
                "currency": c,
                "subtotal": sum((ln.amount for ln in self.lines if ln.currency == c), Decimal(0)),
                "ledger_total": self.ledger_totals.get(c, Decimal(0)),
            }
            for c in self.currencies
        ]

    @property
    def subtotal(self) -> Decimal | None:
        """The sum of the rounded line amounts; None when the lines are in several currencies."""
        if len(self.currencies) > 1:
            return None
        return sum((line.amount for line in self.lines), Decimal(0))

    @property
    def problems(self) -> list[str]:
        """Why finalizing this period would be refused now (the chain itself is checked at finalization)."""
        out = []
        for other in self.overlapping:
            out.append(
                f"the period overlaps invoice {other.number} ({other.period_start.isoformat()} to "
                f"{other.period_end.isoformat()}), which is {other.state}: void it first"
            )
        if self.open_count:
            out.append(
                f"{self.open_count} usage record(s) overlapping the period are still open "
                f"({', '.join(self.open_records)}): finalize once they are final"
            )
        if self.unledgered_count:
            out.append(
                f"{self.unledgered_count} final usage record(s) of the period are not in the ledger "
                f"({', '.join(self.unledgered_records)}): retry once they are sealed"
            )
        if len(self.currencies) > 1:
            out.append(
                f"the period's usage is in several currencies ({', '.join(self.currencies)}): an invoice has one"
            )
        if not self.ledger_entries:
            out.append(f"tenant {self.tenant.slug} has no ledgered usage in the period: nothing to invoice")
        return out


def period_check(*, start: dt.datetime, end: dt.datetime) -> None:
    """The period is [start, end), at whole seconds (the ledger's precision), end after start."""
    for name, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise ValidationError({name: "needs a UTC offset"})
        if value.microsecond:
            raise ValidationError({name: f"must be at whole seconds (the ledger's precision); got {value.isoformat()}"})
    if end <= start:
        raise ValidationError({"end": f"must be after start ({start.isoformat()}); got {end.isoformat()}"})


def _line_key(kind: str, sku: str, job: str, currency: str) -> tuple[str, str, str, str]:
    if kind == UsageKind.TOKENS:
        return (kind, "", job.removeprefix("llm:"), currency)
    return (kind, sku, "", currency)


def _sort_key(line: Line) -> tuple:
    rank = KIND_ORDER.index(line.kind) if line.kind in KIND_ORDER else len(KIND_ORDER)
    return (line.currency, rank, line.kind, line.sku, line.model)


def _overlapping(*, tenant_id: int, start: dt.datetime, end: dt.datetime, exclude: int | None = None) -> list[Invoice]:
    found = Invoice.all_tenants.filter(
        tenant_id=tenant_id,
        state__in=[InvoiceState.FINALIZED, InvoiceState.PAID],
        period_start__lt=end,
        period_end__gt=start,
    ).exclude(pk=exclude)
    return list(found.order_by("period_start"))


def compute(*, tenant: Any, start: dt.datetime, end: dt.datetime, exclude: int | None = None) -> Computation:
    """The lines of the tenant's ledger entries whose start is in [start, end), and the checks of finalization
    except the chain's. Exact: costs are summed as Decimals from the entries' strings, in one pass."""
    period_check(start=start, end=end)
    entries = LedgerEntry.all_tenants.filter(
        tenant_id=tenant.pk, start__gte=ledger.rfc3339(start), start__lt=ledger.rfc3339(end)
    )
    columns = ("sequence", "record_uid", "kind", "sku", "job", "gpu_hours", "rate", "cost", "currency")
    lines: dict[tuple[str, str, str, str], Line] = {}
    totals: dict[str, Decimal] = {}
    sealed: set[str] = set()
    first = last = None
    for sequence, uid, kind, sku, job, gpu_hours, rate, cost, currency in entries.values_list(*columns).iterator(
        chunk_size=CHUNK
    ):
        key = _line_key(kind, sku, job, currency)
        line = lines.get(key)
        if line is None:
            line = lines[key] = Line(kind=key[0], sku=key[1], model=key[2], currency=currency)
        line.entries += 1
        line.gpu_hours += Decimal(gpu_hours)
        line.rates.add(Decimal(rate))
        line.amount_exact += Decimal(cost)
        totals[currency] = totals.get(currency, Decimal(0)) + Decimal(cost)
        sealed.add(uid.replace("-", ""))
        first = sequence if first is None else min(first, sequence)
        last = sequence if last is None else max(last, sequence)
    records = UsageRecord.all_tenants.filter(tenant_id=tenant.pk)
    tokens = (
        records.filter(kind=UsageKind.TOKENS, final=True, start__gte=start, start__lt=end)
        .values("model", "currency")
        .annotate(inp=Sum("input_tokens"), out=Sum("output_tokens"))
        .order_by()
    )
    for row in tokens:
        line = lines.get((UsageKind.TOKENS, "", row["model"], row["currency"]))
        if line is not None:
            line.input_tokens, line.output_tokens = row["inp"] or 0, row["out"] or 0
    # Open runs overlap the period when they started before its end (they have not ended).
    open_records = records.filter(final=False, start__lt=end).order_by("start", "id")
    unledgered: list[str] = []
    unledgered_count = 0
    final_in_period = records.filter(final=True, start__gte=start, start__lt=end).order_by("start", "id")
    for uid, name in final_in_period.values_list("uid", "name").iterator(chunk_size=CHUNK):
        if uid.hex not in sealed:
            unledgered_count += 1
            if len(unledgered) < SAMPLE:
                unledgered.append(name)
    ordered = sorted(lines.values(), key=_sort_key)
    for position, line in enumerate(ordered, start=1):
        line.position = position
    return Computation(
        tenant=tenant,
        start=start,
        end=end,
        lines=ordered,
        ledger_entries=sum(line.entries for line in ordered),
        ledger_first_sequence=first,
        ledger_last_sequence=last,
        ledger_totals=totals,
        open_records=list(open_records.values_list("name", flat=True)[:SAMPLE]),
        open_count=open_records.count(),
        unledgered_records=unledgered,
        unledgered_count=unledgered_count,
        overlapping=_overlapping(tenant_id=tenant.pk, start=start, end=end, exclude=exclude),
    )


def invoice_estimate(*, tenant: Any, start: dt.datetime, end: dt.datetime) -> Computation:
    """What an invoice of the period would hold now (nothing is written)."""
    return compute(tenant=tenant, start=start, end=end)
