"""Chargeback: cost centers (platform-level), which cost center each tenant's invoices are charged to, and the
report of a period.

The report is built from invoices, so it sums to them exactly: by default the finalized and paid invoices whose
period starts in the window; with `source="estimates"` the estimate of the window for every tenant with ledgered
usage in it (the computation finalizing would use). Each tenant's amount is its invoices' subtotals; the cost
center's overhead percentage is applied per tenant, rounded half-up to the currency's minor units, and a cost
center's overhead is the sum of its tenants'. Tenants in no cost center are in the `unassigned` row (no overhead).
Amounts in different currencies are never added: rows and totals are per currency.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core import scopes as S
from apps.core.audit import audit_record, snapshot
from apps.core.principal import Principal
from apps.tenants.models import Tenant

from ..choices import InvoiceState
from ..models import CostCenter, Invoice, LedgerEntry, TenantCostCenter
from .invoicing import compute, period_check, round_money
from .ledger import rfc3339

UNASSIGNED = "unassigned"
SOURCES = ("invoices", "estimates")
COST_CENTER_FIELDS = ("name", "overhead_percent", "description")
_AUDIT = (*CostCenter.AUDIT_FIELDS, "tenants")


def _require_platform(actor: Principal) -> None:
    if not (actor.is_platform and S.ADMIN in actor.platform_scopes):
        raise PermissionError("only platform staff with admin can change cost centers")


def cost_center_tenants(cost_center: CostCenter) -> list[str]:
    """The slugs of the tenants charged to this cost center (uses a prefetched `tenant_links__tenant`)."""
    return sorted(link.tenant.slug for link in cost_center.tenant_links.all())


def _snapshot(cost_center: CostCenter) -> dict[str, Any]:
    tenants = sorted(TenantCostCenter.objects.filter(cost_center=cost_center).values_list("tenant__slug", flat=True))
    return {**snapshot(cost_center, CostCenter.AUDIT_FIELDS), "tenants": tenants}


def _audit(actor: Principal, action: str, cost_center: CostCenter, before: Any, after: Any) -> None:
    audit_record(
        actor=actor,
        action=action,
        obj=cost_center,
        object_type="cost_center",
        object_id=cost_center.code,
        tenant_id=None,
        before=before,
        after=after,
    )


def _validated(cost_center: CostCenter) -> CostCenter:
    if cost_center.code == UNASSIGNED:
        raise ValidationError({"code": f"{UNASSIGNED!r} is reserved for tenants in no cost center"})
    try:
        cost_center.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from exc
    return cost_center


def cost_center_tenants_check(*, cost_center: CostCenter | None, slugs: Iterable[str]) -> dict[str, Any]:
    """The tenants of these slugs, if each exists and is in no other cost center (else ValidationError naming it)."""
    slugs = list(dict.fromkeys(slugs))
    found = {t.slug: t for t in Tenant.objects.filter(slug__in=slugs)}
    missing = [s for s in slugs if s not in found]
    if missing:
        raise ValidationError({"tenants": f"no tenant {', '.join(map(repr, missing))}"})
    taken = TenantCostCenter.objects.filter(tenant__slug__in=slugs).select_related("tenant", "cost_center")
    if cost_center is not None and cost_center.pk is not None:
        taken = taken.exclude(cost_center=cost_center)
    for link in taken.order_by("tenant__slug"):
        raise ValidationError(
            {"tenants": f"tenant {link.tenant.slug!r} is in cost center {link.cost_center.code!r}: remove it there"}
        )
    return found


def _set_tenants(cost_center: CostCenter, slugs: Iterable[str]) -> None:
    """Charge exactly these tenants to the cost center. A tenant in another cost center is refused, naming it."""
    slugs = list(dict.fromkeys(slugs))
    found = cost_center_tenants_check(cost_center=cost_center, slugs=slugs)
    TenantCostCenter.objects.filter(cost_center=cost_center).exclude(tenant__slug__in=slugs).delete()
    have = set(TenantCostCenter.objects.filter(cost_center=cost_center).values_list("tenant_id", flat=True))
    TenantCostCenter.objects.bulk_create(
        [TenantCostCenter(tenant=found[s], cost_center=cost_center) for s in slugs if found[s].pk not in have]
    )


@transaction.atomic
def cost_center_create(
    *, actor: Principal, code: str, name: str, tenants: Iterable[str] = (), **fields: Any
) -> CostCenter:
    """Add a cost center (and charge these tenants to it). Raises ValidationError naming the field."""
    _require_platform(actor)
    unknown = sorted(set(fields) - set(COST_CENTER_FIELDS))
    if unknown:
        raise ValidationError({n: "unknown field" for n in unknown})
    if CostCenter.objects.filter(code=code).exists():
        raise ValidationError({"code": f"a cost center with code {code!r} already exists"})
    cost_center = _validated(CostCenter(code=code, name=name, **fields))
    cost_center.save()
    _set_tenants(cost_center, tenants)
    _audit(actor, "cost_center.create", cost_center, None, _snapshot(cost_center))
    return cost_center


@transaction.atomic
def cost_center_update(
    *, actor: Principal, cost_center: CostCenter, tenants: Iterable[str] | None = None, **changes: Any
) -> CostCenter:
    """Change a cost center's name, overhead, description, or (when given) its whole list of tenants."""
    _require_platform(actor)
    unknown = sorted(set(changes) - set(COST_CENTER_FIELDS))
    if unknown:
        raise ValidationError({n: "unknown field, or one that cannot be changed" for n in unknown})
    cost_center = CostCenter.objects.select_for_update().get(pk=cost_center.pk)
    before = _snapshot(cost_center)
    for key, value in changes.items():
        setattr(cost_center, key, value)
    _validated(cost_center).save()
    if tenants is not None:
        _set_tenants(cost_center, tenants)
    after = _snapshot(cost_center)
    if after != before:
        _audit(actor, "cost_center.update", cost_center, before, after)
    return cost_center


@transaction.atomic
def cost_center_delete(*, actor: Principal, cost_center: CostCenter) -> None:
    """Remove a cost center; its tenants become unassigned (the audit row lists them)."""
    _require_platform(actor)
    _audit(actor, "cost_center.delete", cost_center, _snapshot(cost_center), None)
    TenantCostCenter.objects.filter(cost_center=cost_center).delete()
    cost_center.delete()


def cost_centers() -> Any:
    return CostCenter.objects.prefetch_related("tenant_links__tenant").order_by("code")


# --- the report ----------------------------------------------------------------------------------------------------


@dataclass
class TenantCharge:
    tenant: str
    currency: str
    amount: Decimal = Decimal(0)
    overhead: Decimal = Decimal(0)
    invoices: list[str] = field(default_factory=list)

    @property
    def total(self) -> Decimal:
        return self.amount + self.overhead


@dataclass
class CostCenterCharge:
    cost_center: str
    name: str
    overhead_percent: Decimal
    currency: str
    tenants: list[TenantCharge] = field(default_factory=list)

    @property
    def amount(self) -> Decimal:
        return sum((t.amount for t in self.tenants), Decimal(0))

    @property
    def overhead(self) -> Decimal:
        return sum((t.overhead for t in self.tenants), Decimal(0))

    @property
    def total(self) -> Decimal:
        return self.amount + self.overhead


@dataclass
class ChargebackReport:
    start: dt.datetime
    end: dt.datetime
    source: str
    rows: list[CostCenterCharge]

    @property
    def totals(self) -> list[dict[str, Any]]:
        """Per currency: the invoiced amount (the invoices' sum), overhead, total, and how many invoices."""
        out: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            total = out.setdefault(
                row.currency,
                {"currency": row.currency, "amount": Decimal(0), "overhead": Decimal(0), "invoices": 0},
            )
            total["amount"] += row.amount
            total["overhead"] += row.overhead
            total["invoices"] += sum(len(t.invoices) for t in row.tenants)
        return [{**t, "total": t["amount"] + t["overhead"]} for _c, t in sorted(out.items())]


def _charges_from_invoices(start: dt.datetime, end: dt.datetime) -> dict[tuple[int, str], TenantCharge]:
    charges: dict[tuple[int, str], TenantCharge] = {}
    invoices = Invoice.all_tenants.filter(
        state__in=[InvoiceState.FINALIZED, InvoiceState.PAID], period_start__gte=start, period_start__lt=end
    ).select_related("tenant")
    for invoice in invoices.order_by("tenant__slug", "sequence"):
        key = (invoice.tenant_id, invoice.currency)
        charge = charges.setdefault(key, TenantCharge(tenant=invoice.tenant.slug, currency=invoice.currency))
        charge.amount += invoice.subtotal
        charge.invoices.append(invoice.number)
    return charges


def _charges_from_estimates(start: dt.datetime, end: dt.datetime) -> dict[tuple[int, str], TenantCharge]:
    window = LedgerEntry.all_tenants.filter(start__gte=rfc3339(start), start__lt=rfc3339(end))
    tenant_ids = set(window.values_list("tenant_id", flat=True).distinct())
    charges: dict[tuple[int, str], TenantCharge] = {}
    for tenant in Tenant.objects.filter(pk__in=tenant_ids).order_by("slug"):
        for total in compute(tenant=tenant, start=start, end=end).totals:
            charges[(tenant.pk, total["currency"])] = TenantCharge(
                tenant=tenant.slug, currency=total["currency"], amount=total["subtotal"]
            )
    return charges


def chargeback_report(*, start: dt.datetime, end: dt.datetime, source: str = "invoices") -> ChargebackReport:
    """Per cost center and currency: its tenants' invoiced amounts in [start, end), overhead and total.

    Raises:
        ValidationError: a bad period or source.
    """
    period_check(start=start, end=end)
    if source not in SOURCES:
        raise ValidationError({"source": f"must be one of {', '.join(SOURCES)}; got {source!r}"})
    charges = (_charges_from_invoices if source == "invoices" else _charges_from_estimates)(start, end)
    mapped = TenantCostCenter.objects.filter(tenant_id__in={t for t, _c in charges}).select_related("cost_center")
    links = {link.tenant_id: link.cost_center for link in mapped}
    rows: dict[tuple[str, str], CostCenterCharge] = {}
    for (tenant_id, currency), charge in charges.items():
        center = links.get(tenant_id)
        code = center.code if center else UNASSIGNED
        name = center.name if center else "Unassigned"
        percent = center.overhead_percent if center else Decimal(0)
        row = rows.setdefault(
            (code, currency),
            CostCenterCharge(cost_center=code, name=name, overhead_percent=percent, currency=currency),
        )
        charge.overhead = round_money(charge.amount * percent / 100, currency)
        row.tenants.append(charge)
    ordered = sorted(rows.values(), key=lambda r: (r.cost_center == UNASSIGNED, r.cost_center, r.currency))
    for row in ordered:
        row.tenants.sort(key=lambda t: t.tenant)
    return ChargebackReport(start=start, end=end, source=source, rows=ordered)
