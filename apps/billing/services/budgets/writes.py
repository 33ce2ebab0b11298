"""Budget writes: create, update and delete, permission-checked, transactional, audited, evaluated at once.

A tenant's budget is written with `billing:write` in the tenant (tenant admins and platform admins); a cost
center's by platform admins only.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core.audit import audit_record, snapshot
from apps.core.principal import Principal
from apps.core.scopes import ADMIN

from ...choices import BudgetPeriod
from ...models import Budget, CostCenter
from ...selectors import pricing
from .evaluation import evaluate
from .validation import FIELDS, budget_validate

WRITE = "billing:write"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _reject_unknown(fields: dict[str, Any]) -> None:
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValidationError({name: "unknown field, or one that cannot be changed" for name in unknown})


def _require_write(actor: Principal, budget: Budget) -> None:
    if budget.tenant_id is None:
        if not (actor.is_platform and ADMIN in actor.platform_scopes):
            raise PermissionError("only platform staff with admin can write a cost center's budget")
    elif not actor.has_scope(WRITE, budget.tenant_id):
        raise PermissionError(f"this credential lacks the scope {WRITE!r} in tenant {budget.tenant.slug}")


def _audit(actor: Principal, action: str, budget: Budget, before: Any, after: Any) -> None:
    audit_record(
        actor=actor,
        action=action,
        obj=budget,
        object_type="budget",
        object_id=budget.name,
        tenant_id=budget.tenant_id,
        tenant_slug=budget.tenant.slug if budget.tenant_id else "",
        before=before,
        after=after,
    )


@transaction.atomic
def budget_create(
    *, actor: Principal, name: Any, tenant: Any = None, cost_center: CostCenter | None = None, **fields: Any
) -> Budget:
    """A budget of `tenant`, or of `cost_center` (platform admins only), evaluated at once. Raises
    ValidationError naming the field, PermissionError."""
    _reject_unknown(fields)
    if (tenant is None) == (cost_center is None):
        raise ValidationError({"cost_center": "a budget is either a tenant's or a cost center's"})
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValidationError({"name": "must be a DNS label: lowercase letters, digits and '-', at most 63"})
    defaults = {"period": BudgetPeriod.MONTHLY, "currency": pricing.DEFAULT_CURRENCY, "hard_limit": False}
    defaults.update(thresholds=[50, 80, 100], description="", start=None, end=None, amount=None)
    budget = Budget(tenant=tenant, cost_center=cost_center, name=name, **budget_validate({**defaults, **fields}))
    _require_write(actor, budget)
    same_name = Budget.all_tenants.filter(name=name, tenant=tenant) if tenant else None
    if same_name is None:
        same_name = Budget.all_tenants.filter(name=name, tenant__isnull=True)
    if same_name.exists():
        where = f"tenant {tenant.slug}" if tenant else "the platform's cost center budgets"
        raise ValidationError({"name": f"a budget named {name!r} already exists in {where}"})
    try:
        with transaction.atomic():
            budget.save()
    except IntegrityError as exc:
        raise ValidationError({"name": f"a budget named {name!r} already exists"}) from exc
    _audit(actor, "budget.create", budget, None, snapshot(budget, Budget.AUDIT_FIELDS))
    evaluate([budget], timezone.now())
    budget.refresh_from_db()
    return budget


@transaction.atomic
def budget_update(*, actor: Principal, budget: Budget, **changes: Any) -> Budget:
    """Change a budget's period, amount, currency, thresholds, hard limit or description; evaluated at once."""
    _reject_unknown(changes)
    budget = (
        Budget.all_tenants.select_for_update(of=("self",)).select_related("tenant", "cost_center").get(pk=budget.pk)
    )
    _require_write(actor, budget)
    current = {name: getattr(budget, name) for name in FIELDS}
    if changes.get("period") == BudgetPeriod.MONTHLY:  # leaving a custom period drops its window
        current.update(start=None, end=None)
    checked = budget_validate({**current, **changes})
    before = snapshot(budget, Budget.AUDIT_FIELDS)
    for key, value in checked.items():
        setattr(budget, key, value)
    after = snapshot(budget, Budget.AUDIT_FIELDS)
    if after == before:
        return budget
    budget.generation += 1
    budget.save()
    _audit(actor, "budget.update", budget, before, after)
    evaluate([budget], timezone.now())
    budget.refresh_from_db()
    return budget


@transaction.atomic
def budget_delete(*, actor: Principal, budget: Budget) -> None:
    """Remove a budget and its threshold events."""
    _require_write(actor, budget)
    _audit(actor, "budget.delete", budget, snapshot(budget, Budget.AUDIT_FIELDS), None)
    budget.delete()
