"""Admission: which waiting jobs may start now, and why the others wait.

`decide.admit` is the one admission function, pure (no I/O), over the records of `usage`. The job reconciler feeds
it from the database through `inputs` (waiting jobs and what admitted jobs hold), `limits` (queue quotas, tenant
ceilings) and `budgets` (the room hard budgets leave), and applies its decisions (apps.jobs.reconciler.admitting).
Modules depend in that direction: usage <- decide; usage <- inputs, limits, budgets.
"""

from .decide import admit
from .usage import (
    DEFAULT_QUEUE,
    GPU,
    BudgetRoom,
    CycleUsage,
    Decision,
    Demand,
    Holding,
    QueueQuota,
    Vector,
    never_fits,
    what_is_missing,
)

__all__ = [
    "admit",
    "DEFAULT_QUEUE",
    "GPU",
    "BudgetRoom",
    "CycleUsage",
    "Decision",
    "Demand",
    "Holding",
    "QueueQuota",
    "Vector",
    "never_fits",
    "what_is_missing",
]
