"""Invoices: the estimate of any period (`computation`) and the Draft -> Finalized -> Paid or Void lifecycle
(`lifecycle`). A finalized invoice's lines are the ledger entries of its period, so it is reproducible from the
ledger alone, to the cent. docs/invoices.md."""

from .computation import (
    Computation,
    InvoiceConflict,
    Line,
    compute,
    invoice_estimate,
    minor_units,
    money_text,
    period_check,
    round_money,
)
from .lifecycle import (
    invoice_create,
    invoice_delete,
    invoice_finalize,
    invoice_mark_paid,
    invoice_void,
    invoices_readable,
)

__all__ = [
    "Computation",
    "InvoiceConflict",
    "Line",
    "compute",
    "invoice_create",
    "invoice_delete",
    "invoice_estimate",
    "invoice_finalize",
    "invoice_mark_paid",
    "invoice_void",
    "invoices_readable",
    "minor_units",
    "money_text",
    "period_check",
    "round_money",
]
