"""Priority classes (platform-level): create, update, delete; at most one is the default."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from apps.core.audit import snapshot
from apps.core.principal import Principal

from ..choices import PreemptionPolicy
from ..models import PriorityClass
from ._common import _audit, _full_clean, _locked_and_changed, _reject_unknown, _require_platform

PRIORITY_CLASS_FIELDS = ("value", "preemption_policy", "description", "is_default")


def _check_single_default(priority_class: PriorityClass) -> None:
    if not priority_class.is_default:
        return
    other = PriorityClass.objects.select_for_update().filter(is_default=True).exclude(pk=priority_class.pk).first()
    if other is not None:
        raise ValidationError({"is_default": f"{other.name!r} is already the default priority class; unset it first"})


@transaction.atomic
def priority_class_create(
    *,
    actor: Principal,
    name: str,
    value: int,
    preemption_policy: str = PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    description: str = "",
    is_default: bool = False,
) -> PriorityClass:
    """Create a priority class; at most one may be the default."""
    _require_platform(actor, "priority classes")
    priority_class = PriorityClass(
        name=name, value=value, preemption_policy=preemption_policy, description=description, is_default=is_default
    )
    _full_clean(priority_class)
    _check_single_default(priority_class)
    if PriorityClass.objects.filter(name=name).exists():
        raise ValidationError({"name": f"priority class {name!r} already exists"})
    try:
        with transaction.atomic():
            priority_class.save()
    except IntegrityError as exc:
        raise ValidationError({"is_default": "another priority class became the default meanwhile"}) from exc
    _audit(actor, "priority_class.create", priority_class, None, snapshot(priority_class, PriorityClass.AUDIT_FIELDS))
    return priority_class


@transaction.atomic
def priority_class_update(*, actor: Principal, priority_class: PriorityClass, **changes: Any) -> PriorityClass:
    _require_platform(actor, "priority classes")
    _reject_unknown(changes, PRIORITY_CLASS_FIELDS)
    priority_class, before = _locked_and_changed(
        PriorityClass.objects, priority_class.pk, PriorityClass.AUDIT_FIELDS, changes
    )
    _full_clean(priority_class)
    _check_single_default(priority_class)
    after = snapshot(priority_class, PriorityClass.AUDIT_FIELDS)
    if after != before:
        try:
            with transaction.atomic():
                priority_class.save()
        except IntegrityError as exc:
            raise ValidationError({"is_default": "another priority class became the default meanwhile"}) from exc
        _audit(actor, "priority_class.update", priority_class, before, after)
    return priority_class


@transaction.atomic
def priority_class_delete(*, actor: Principal, priority_class: PriorityClass) -> None:
    _require_platform(actor, "priority classes")
    _audit(actor, "priority_class.delete", priority_class, snapshot(priority_class, PriorityClass.AUDIT_FIELDS), None)
    priority_class.delete()
