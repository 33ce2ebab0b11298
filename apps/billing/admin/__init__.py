"""Billing's admin: the SKU catalog, usage records and the ledger (`catalog`), budgets (`budgets`), invoices and
cost centers (`invoices`). Importing the modules registers their ModelAdmins."""

from . import budgets, catalog, invoices

__all__ = ["budgets", "catalog", "invoices"]
