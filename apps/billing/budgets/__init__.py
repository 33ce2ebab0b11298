"""Budgets: their writes (validated, transactional, audited), their evaluation, and what admission reads of them.

A budget belongs to a tenant (tenant admins and platform admins write it: `billing:write` in the tenant) or to a
cost center (platform admins only), and covers a period: the current UTC month, or a custom `[start, end)`.

- `validation.py`: the spec fields (`FIELDS`) and `budget_validate`;
- `writes.py`: `budget_create`, `budget_update`, `budget_delete`, each evaluated at once;
- `evaluation.py`: `budgets_evaluate` (periodic `evaluate-budgets`, nudged by `budgets_nudge`), each budget's state
  and each threshold crossed recorded and emitted once per period;
- `in_force.py`: `hard_budgets_in_force`, the hard budgets admission reads (cached while there are none).

This package's names below are its interface; other apps reach them through apps.billing.services and selectors.
"""

from .evaluation import budgets_evaluate, budgets_nudge, percent_of, period_of, state_of
from .in_force import HardBudget, forget_hard_budgets, hard_budgets_in_force, hard_budgets_maybe
from .validation import FIELDS, budget_validate
from .writes import budget_create, budget_delete, budget_update

__all__ = [
    "FIELDS",
    "HardBudget",
    "budget_create",
    "budget_delete",
    "budget_update",
    "budget_validate",
    "budgets_evaluate",
    "budgets_nudge",
    "forget_hard_budgets",
    "hard_budgets_in_force",
    "hard_budgets_maybe",
    "percent_of",
    "period_of",
    "state_of",
]
