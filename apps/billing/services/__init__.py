"""Billing's writes, the app's public face for changes: every change to billing state goes through these functions.

- `catalog`: the GPU SKU catalog's writes (platform-only, audited; a priced SKU's price is history);
- `runs`: job-run usage (`usage_job_events`, called by the job service with each batch of lifecycle events;
  `usage_job_deleted`; `usage_refresh`, periodic, with the orphan sweep through apps.billing.selectors.run_owners);
- `metering`: external events (`usage_events_ingest`) and the gateway's token hours (`usage_tokens_collect`);
- `reservations`: reservations billed as usage (`usage_reservations_sync`, `usage_reservation_deleted`, registered
  with queueing's reservation hooks in BillingConfig.ready());
- `ledger`: the per-tenant hash chain (`seal`, `append`, `verify`, `ledger_verify`);
- `budgets/`: budget writes and evaluation; `invoicing/`: invoices; `chargeback`: cost centers and the report;
- `stripe_sync/`: Stripe, test mode only.

`cost_estimate` and `CostEstimate` (apps.billing.selectors.estimate) are named here too: the job service prices a
job before submission through this face.
"""

from ..selectors.estimate import CostEstimate, cost_estimate
from .budgets import budget_create, budget_delete, budget_update, budget_validate, budgets_evaluate, budgets_nudge
from .catalog import SKU_FIELDS, SkuConflict, sku_create, sku_delete, sku_update, sku_validate
from .chargeback import (
    chargeback_report,
    cost_center_create,
    cost_center_delete,
    cost_center_tenants,
    cost_center_tenants_check,
    cost_center_update,
    cost_centers,
)
from .invoicing import (
    invoice_create,
    invoice_delete,
    invoice_estimate,
    invoice_finalize,
    invoice_mark_paid,
    invoice_void,
    invoices_readable,
)
from .ledger import ledger_verify
from .metering import IngestResult, usage_events_ingest, usage_tokens_collect
from .reservations import usage_reservation_deleted, usage_reservations_sync
from .runs import close_records, usage_job_deleted, usage_job_events, usage_open_for, usage_refresh
from .stripe_sync import invoice_send_to_stripe, stripe_webhook_receive

__all__ = [
    "SKU_FIELDS",
    "CostEstimate",
    "IngestResult",
    "SkuConflict",
    "budget_create",
    "budget_delete",
    "budget_update",
    "budget_validate",
    "budgets_evaluate",
    "budgets_nudge",
    "chargeback_report",
    "close_records",
    "cost_center_create",
    "cost_center_delete",
    "cost_center_tenants",
    "cost_center_tenants_check",
    "cost_center_update",
    "cost_centers",
    "cost_estimate",
    "invoice_create",
    "invoice_delete",
    "invoice_estimate",
    "invoice_finalize",
    "invoice_mark_paid",
    "invoice_send_to_stripe",
    "invoice_void",
    "invoices_readable",
    "ledger_verify",
    "sku_create",
    "sku_delete",
    "sku_update",
    "sku_validate",
    "stripe_webhook_receive",
    "usage_events_ingest",
    "usage_job_deleted",
    "usage_job_events",
    "usage_open_for",
    "usage_refresh",
    "usage_reservation_deleted",
    "usage_reservations_sync",
    "usage_tokens_collect",
]
