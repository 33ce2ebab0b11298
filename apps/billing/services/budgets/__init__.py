"""Budgets: their writes (validated, transactional, audited) and their evaluation.

A budget belongs to a tenant (tenant admins and platform admins write it: `billing:write` in the tenant) or to a
cost center (platform admins only), and covers a period: the current UTC month, or a custom `[start, end)`.

- `validation.py`: the spec fields (`FIELDS`) and `budget_validate`;
- `writes.py`: `budget_create`, `budget_update`, `budget_delete`, each evaluated at once;
- `evaluation.py`: `budgets_evaluate` (periodic `evaluate-budgets`, nudged by `budgets_nudge`), each budget's state
  and each threshold crossed recorded and emitted once per period;

What admission reads of them (the hard budgets in force) is apps.billing.selectors.budgets. Other apps reach these
names through apps.billing.services.
"""

from .evaluation import budgets_evaluate, budgets_nudge, percent_of, period_of, state_of
from .validation import FIELDS, budget_validate
from .writes import budget_create, budget_delete, budget_update

__all__ = [
    "FIELDS",
    "budget_create",
    "budget_delete",
    "budget_update",
    "budget_validate",
    "budgets_evaluate",
    "budgets_nudge",
    "percent_of",
    "period_of",
    "state_of",
]
