"""Billing data, one module per topic: the SKU catalog and usage records (`usage`), the per-tenant hash-chained
ledger (`ledger`), budgets (`budgets`), invoices (`invoices`), chargeback's cost centers (`cost_centers`) and the
Stripe events processed (`stripe`). `triggers` holds the database triggers that make history append-only
(migrations 0002, 0004, 0006). Choices live in apps.billing.choices.
"""

from .budgets import DEFAULT_THRESHOLDS, HARD_CACHE_KEY, Budget, BudgetEvent, default_thresholds, forget_hard_budgets
from .cost_centers import CostCenter, TenantCostCenter
from .invoices import Invoice, InvoiceCounter, InvoiceLine
from .ledger import LedgerEntry, LedgerHead
from .stripe import StripeEvent
from .usage import CATALOG_CACHE_KEY, CPU_GPU_TYPE, CURRENCY, GpuSku, ImmutableError, UsageRecord, forget_catalog

__all__ = [
    "CATALOG_CACHE_KEY",
    "CPU_GPU_TYPE",
    "CURRENCY",
    "DEFAULT_THRESHOLDS",
    "HARD_CACHE_KEY",
    "Budget",
    "BudgetEvent",
    "CostCenter",
    "GpuSku",
    "ImmutableError",
    "Invoice",
    "InvoiceCounter",
    "InvoiceLine",
    "LedgerEntry",
    "LedgerHead",
    "StripeEvent",
    "TenantCostCenter",
    "UsageRecord",
    "default_thresholds",
    "forget_catalog",
    "forget_hard_budgets",
]
