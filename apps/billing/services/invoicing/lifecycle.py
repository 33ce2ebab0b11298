"""The invoice lifecycle: Draft -> Finalized -> Paid or Void (a Draft may also be deleted). Platform admins only,
transactional, audited.

Finalizing runs in one transaction under the tenant's invoice counter lock (SELECT … FOR UPDATE) and its ledger
head lock (no appends meanwhile): it recomputes the lines, refuses (409, nothing written, no number used) what
Computation.problems names, a period that has not ended and a broken chain, then takes the tenant's next number
in the same transaction as the state change, so numbers have neither gaps nor duplicates.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.core import events
from apps.core import scopes as S
from apps.core.audit import audit_record, snapshot
from apps.core.principal import Principal

from ...choices import InvoiceState
from ...models import Invoice, InvoiceCounter, InvoiceLine
from .. import ledger
from .computation import SAMPLE, Computation, InvoiceConflict, compute, money_text, period_check


def _require_platform(actor: Principal, what: str) -> None:
    if not (actor.is_platform and S.ADMIN in actor.platform_scopes):
        raise PermissionError(f"only platform staff with admin can {what} invoices")


def _audit(actor: Principal, action: str, invoice: Invoice, before: Any) -> None:
    after = snapshot(invoice, Invoice.AUDIT_FIELDS) if action != "invoice.delete" else None
    audit_record(
        actor=actor,
        action=action,
        obj=invoice,
        object_type="invoice",
        object_id=str(invoice.pk),
        tenant_id=invoice.tenant_id,
        tenant_slug=invoice.tenant.slug,
        before=before,
        after=after,
    )


def _write_lines(invoice: Invoice, computation: Computation) -> None:
    InvoiceLine.objects.filter(invoice=invoice).delete()  # a draft's earlier computation
    InvoiceLine.objects.bulk_create(
        [
            InvoiceLine(
                invoice=invoice,
                position=line.position,
                kind=line.kind,
                sku=line.sku,
                model=line.model,
                description=line.description,
                entries=line.entries,
                gpu_hours=line.gpu_hours,
                input_tokens=line.input_tokens,
                output_tokens=line.output_tokens,
                rate=line.rate,
                amount_exact=line.amount_exact,
                amount=line.amount,
                currency=line.currency,
            )
            for line in computation.lines
        ]
    )


def _summary(computation: Computation, head: ledger.LedgerHead | None = None) -> dict[str, Any]:
    currency = computation.currency
    return {
        "currency": currency,
        "subtotal": computation.subtotal if currency else Decimal(0),
        "ledger_entries": computation.ledger_entries,
        "ledger_first_sequence": computation.ledger_first_sequence,
        "ledger_last_sequence": computation.ledger_last_sequence,
        "ledger_total": computation.ledger_totals.get(currency, Decimal(0)),
        **({"ledger_head_sequence": head.sequence, "ledger_head_hash": head.hash} if head is not None else {}),
    }


@transaction.atomic
def invoice_create(
    *,
    actor: Principal,
    tenant: Any,
    start: dt.datetime,
    end: dt.datetime,
    note: str = "",
    now: dt.datetime | None = None,
) -> Invoice:
    """A Draft for the period, its lines computed from the ledger now (finalizing computes them again).

    Raises:
        ValidationError: a bad period or note. InvoiceConflict: the period overlaps a finalized or paid invoice.
    """
    _require_platform(actor, "create")
    period_check(start=start, end=end)
    if len(note) > 500:
        raise ValidationError({"note": "at most 500 characters"})
    computation = compute(tenant=tenant, start=start, end=end)
    if computation.overlapping:
        raise InvoiceConflict(computation.problems[0])
    now = now or timezone.now()
    invoice = Invoice(
        tenant=tenant,
        period_start=start,
        period_end=end,
        note=note,
        computed_at=now,
        created_by=actor.label[:200],
        **_summary(computation),
    )
    invoice.save()
    _write_lines(invoice, computation)
    _audit(actor, "invoice.create", invoice, None)
    return invoice


def _locked(invoice: Invoice) -> Invoice:
    return Invoice.all_tenants.select_for_update(of=("self",)).select_related("tenant").get(pk=invoice.pk)


def _lock_counter(tenant_id: int) -> InvoiceCounter:
    """The tenant's counter row, locked until commit (created at 0 the first time; a concurrent creator's row is
    waited for by the conflict, then locked)."""
    InvoiceCounter.objects.bulk_create([InvoiceCounter(tenant_id=tenant_id)], ignore_conflicts=True)
    return InvoiceCounter.objects.select_for_update().get(tenant_id=tenant_id)


def _transition(invoice: Invoice, expected: str, **changes: Any) -> Invoice:
    """Move the invoice from `expected` with a conditional update (it is locked, so this always matches)."""
    if not Invoice.all_tenants.filter(pk=invoice.pk, state=expected).update(**changes):
        raise InvoiceConflict(f"invoice {invoice} changed meanwhile: retry")
    for key, value in changes.items():
        setattr(invoice, key, value)
    return invoice


def _event(invoice: Invoice, type_: str) -> None:
    data = {
        "id": invoice.pk,
        "number": invoice.number,
        "tenant": invoice.tenant.slug,
        "period_start": invoice.period_start.isoformat(),
        "period_end": invoice.period_end.isoformat(),
        "currency": invoice.currency,
        "subtotal": money_text(invoice.subtotal, invoice.currency),
        "state": invoice.state,
    }
    events.emit(tenant=invoice.tenant, type=type_, data=data, subject=f"invoice/{invoice.number}")


@transaction.atomic
def invoice_finalize(*, actor: Principal, invoice: Invoice, now: dt.datetime | None = None) -> Invoice:
    """Recompute the Draft's lines from the ledger, check the period, and give it the tenant's next number.

    Raises:
        InvoiceConflict: not a draft, the period has not ended, or a problem of Computation.problems, or a broken
        ledger chain. Nothing is written then, and no number is used.
    """
    _require_platform(actor, "finalize")
    now = now or timezone.now()
    counter = _lock_counter(invoice.tenant_id)  # one finalization per tenant at a time
    invoice = _locked(invoice)
    if invoice.state != InvoiceState.DRAFT:
        raise InvoiceConflict(f"invoice {invoice} is {invoice.state}: only a draft can be finalized")
    if invoice.period_end > now:
        raise InvoiceConflict(
            f"the period ends at {invoice.period_end.isoformat()}, in the future: usage may still arrive"
        )
    head = ledger.head_lock(tenant_id=invoice.tenant_id)  # no appends until commit: what is checked is billed
    computation = compute(tenant=invoice.tenant, start=invoice.period_start, end=invoice.period_end)
    if computation.problems:
        raise InvoiceConflict("cannot finalize: " + "; ".join(computation.problems))
    verification = ledger.verify(tenant_id=invoice.tenant_id, tenant_slug=invoice.tenant.slug)
    if not verification.valid:
        found = ", ".join(f"sequence {p['sequence']}: {p['problem']}" for p in verification.problems[:SAMPLE])
        raise InvoiceConflict(
            f"the ledger chain of tenant {invoice.tenant.slug} is broken ({found}): finalizing is refused until "
            "it verifies (GET /api/v1/ledger/{tenant}/verify/)"
        )
    before = snapshot(invoice, Invoice.AUDIT_FIELDS)
    _write_lines(invoice, computation)
    counter.last += 1
    counter.save(update_fields=["last"])
    _transition(
        invoice,
        InvoiceState.DRAFT,
        state=InvoiceState.FINALIZED,
        sequence=counter.last,
        number=f"INV-{invoice.tenant.slug}-{counter.last:06d}",
        computed_at=now,
        finalized_at=now,
        finalized_by=actor.label[:200],
        **_summary(computation, head),
    )
    _audit(actor, "invoice.finalize", invoice, before)
    _event(invoice, "invoice.finalized")
    return invoice


@transaction.atomic
def invoice_mark_paid(
    *,
    actor: Principal,
    invoice: Invoice,
    paid_at: dt.datetime | None = None,
    reference: str = "",
    now: dt.datetime | None = None,
) -> Invoice:
    """Finalized -> Paid (`paid_at` defaults to now and may not be in the future)."""
    _require_platform(actor, "mark paid")
    now = now or timezone.now()
    paid_at = paid_at or now
    if paid_at > now:
        raise ValidationError({"paid_at": f"must not be in the future; got {paid_at.isoformat()}"})
    if len(reference) > 200:
        raise ValidationError({"reference": "at most 200 characters"})
    invoice = _locked(invoice)
    if invoice.state != InvoiceState.FINALIZED:
        raise InvoiceConflict(f"invoice {invoice} is {invoice.state}: only a finalized invoice can be paid")
    before = snapshot(invoice, Invoice.AUDIT_FIELDS)
    _transition(
        invoice,
        InvoiceState.FINALIZED,
        state=InvoiceState.PAID,
        paid_at=paid_at,
        paid_by=actor.label[:200],
        payment_reference=reference,
    )
    _audit(actor, "invoice.pay", invoice, before)
    _event(invoice, "invoice.paid")
    return invoice


@transaction.atomic
def invoice_void(*, actor: Principal, invoice: Invoice, reason: str, now: dt.datetime | None = None) -> Invoice:
    """Draft or Finalized -> Void, with a reason (3 to 500 characters). A voided invoice keeps its number; the
    period can then be invoiced again under the next one."""
    _require_platform(actor, "void")
    reason = (reason or "").strip()
    if not 3 <= len(reason) <= 500:
        raise ValidationError({"reason": "is required: 3 to 500 characters saying why"})
    invoice = _locked(invoice)
    if invoice.state not in (InvoiceState.DRAFT, InvoiceState.FINALIZED):
        raise InvoiceConflict(f"invoice {invoice} is {invoice.state}: it can no longer be voided")
    before = snapshot(invoice, Invoice.AUDIT_FIELDS)
    _transition(
        invoice,
        invoice.state,
        state=InvoiceState.VOID,
        voided_at=now or timezone.now(),
        voided_by=actor.label[:200],
        void_reason=reason,
    )
    _audit(actor, "invoice.void", invoice, before)
    return invoice


@transaction.atomic
def invoice_delete(*, actor: Principal, invoice: Invoice) -> None:
    """Delete a Draft (a finalized invoice is never deleted: void it)."""
    _require_platform(actor, "delete")
    invoice = _locked(invoice)
    if invoice.state != InvoiceState.DRAFT:
        raise InvoiceConflict(f"invoice {invoice} is {invoice.state}: only a draft can be deleted (void it)")
    _audit(actor, "invoice.delete", invoice, snapshot(invoice, Invoice.AUDIT_FIELDS))
    InvoiceLine.objects.filter(invoice=invoice).delete()
    invoice.delete()


def invoices_readable(queryset: QuerySet[Invoice], *, principal: Principal) -> QuerySet[Invoice]:
    """Shape a (tenant-scoped) queryset of invoices for a reader: with tenant and lines, newest period first.
    Drafts are the platform's work in progress: only platform staff see them."""
    queryset = queryset.select_related("tenant").prefetch_related("lines")
    if not principal.is_platform:
        queryset = queryset.exclude(state=InvoiceState.DRAFT)
    return queryset.order_by("-period_start", "-id")
