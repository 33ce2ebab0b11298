"""Reading billing, the app's public face for reads: the catalog and the SKU in force (`pricing`), usage summed per
group and ledger entries (`usage`), spend in a period (`spend`), the hard budgets admission applies (`budgets`),
the month-end forecast (`forecast`), cost estimates before submission (`estimate`), and the registry through which
the jobs app tells billing which jobs exist (`run_owners`).
"""

from .budgets import HardBudget, hard_budgets_in_force, hard_budgets_maybe
from .estimate import CostEstimate, Forecaster, PricedOption, cost_estimate
from .forecast import Forecast, month_end_forecast
from .pricing import Catalog, catalog, sku_in_force
from .run_owners import job_runs_register, job_timeouts
from .spend import month_of, usage_spend
from .usage import USAGE_GROUPS, USAGE_METRICS, UsageReport, ledger_entries, skus, usage_records_visible, usage_report

__all__ = [
    "USAGE_GROUPS",
    "USAGE_METRICS",
    "Catalog",
    "CostEstimate",
    "Forecast",
    "Forecaster",
    "HardBudget",
    "PricedOption",
    "UsageReport",
    "catalog",
    "cost_estimate",
    "hard_budgets_in_force",
    "hard_budgets_maybe",
    "job_runs_register",
    "job_timeouts",
    "ledger_entries",
    "month_end_forecast",
    "month_of",
    "sku_in_force",
    "skus",
    "usage_records_visible",
    "usage_report",
    "usage_spend",
]
