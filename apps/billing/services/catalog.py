"""The GPU SKU catalog's writes.

Catalog writes are platform-only, transactional and audited. A SKU's price never changes once usage was priced by
it: to change a price, end its window (`effective_to`) and add a SKU after it. Windows of one GPU type never
overlap (checked under a lock on the type's rows).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core import scopes as S
from apps.core.audit import audit_record, snapshot
from apps.core.errors import Conflict
from apps.core.principal import Principal

from ..models import GpuSku, UsageRecord

SKU_FIELDS = tuple(f for f in GpuSku.AUDIT_FIELDS if f != "name")
# Once usage was priced by a SKU, only these may change (its price is history).
SKU_FIELDS_AFTER_USE = ("effective_to", "description")


class SkuConflict(Conflict):
    """The SKU is referenced by usage: its price and window start are history."""


def _require_platform(actor: Principal) -> None:
    if not (actor.is_platform and S.ADMIN in actor.platform_scopes):
        raise PermissionError("only platform staff with admin can change the SKU catalog")


def _audit(actor: Principal, action: str, sku: GpuSku, before: Any, after: Any) -> None:
    audit_record(
        actor=actor,
        action=action,
        obj=sku,
        object_type="gpu_sku",
        object_id=sku.name,
        tenant_id=None,
        before=before,
        after=after,
    )


def _check_window(sku: GpuSku) -> None:
    """Refuse a window that overlaps another SKU of the same GPU type (the type's rows are locked first)."""
    if sku.effective_to is not None and sku.effective_to <= sku.effective_from:
        raise ValidationError({"effective_to": "must be after effective_from"})
    same = GpuSku.objects.select_for_update().filter(gpu_type__iexact=sku.gpu_type).exclude(pk=sku.pk)
    for other in same.order_by("effective_from"):
        starts_before_other_ends = other.effective_to is None or sku.effective_from < other.effective_to
        ends_after_other_starts = sku.effective_to is None or sku.effective_to > other.effective_from
        if starts_before_other_ends and ends_after_other_starts:
            until = other.effective_to.isoformat() if other.effective_to else "open-ended"
            raise ValidationError(
                {
                    "effective_from": f"overlaps SKU {other.name!r} of GPU type {other.gpu_type} "
                    f"({other.effective_from.isoformat()} to {until}): end that SKU's window first"
                }
            )


def sku_validate(sku: GpuSku) -> GpuSku:
    """Field checks and the window check for an unsaved SKU (admin forms call it before saving)."""
    return _validated(sku)


def _validated(sku: GpuSku) -> GpuSku:
    try:
        sku.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from exc
    _check_window(sku)
    return sku


@transaction.atomic
def sku_create(*, actor: Principal, name: str, **fields: Any) -> GpuSku:
    """Add a price to the catalog. Raises ValidationError naming the field (an overlapping window is one)."""
    _require_platform(actor)
    unknown = sorted(set(fields) - set(SKU_FIELDS))
    if unknown:
        raise ValidationError({n: "unknown field" for n in unknown})
    if GpuSku.objects.filter(name=name).exists():
        raise ValidationError({"name": f"a SKU named {name!r} already exists"})
    sku = _validated(GpuSku(name=name, **fields))
    sku.save()
    _audit(actor, "gpu_sku.create", sku, None, snapshot(sku, GpuSku.AUDIT_FIELDS))
    return sku


@transaction.atomic
def sku_update(*, actor: Principal, sku: GpuSku, **changes: Any) -> GpuSku:
    """Change a SKU. Once usage was priced by it, only `effective_to` and `description` may change (409)."""
    _require_platform(actor)
    unknown = sorted(set(changes) - set(SKU_FIELDS))
    if unknown:
        raise ValidationError({n: "unknown field, or one that cannot be changed" for n in unknown})
    sku = GpuSku.objects.select_for_update().get(pk=sku.pk)
    changed = {k: v for k, v in changes.items() if getattr(sku, k) != v}
    if not changed:
        return sku
    frozen = sorted(set(changed) - set(SKU_FIELDS_AFTER_USE))
    if frozen and UsageRecord.all_tenants.filter(sku=sku).exists():
        raise SkuConflict(
            f"SKU {sku.name} has priced usage: {', '.join(frozen)} cannot change; "
            "set effective_to and add a new SKU for the new price"
        )
    before = snapshot(sku, GpuSku.AUDIT_FIELDS)
    for key, value in changed.items():
        setattr(sku, key, value)
    _validated(sku).save()
    _audit(actor, "gpu_sku.update", sku, before, snapshot(sku, GpuSku.AUDIT_FIELDS))
    return sku


@transaction.atomic
def sku_delete(*, actor: Principal, sku: GpuSku) -> None:
    """Remove a SKU that priced nothing yet (else 409: end its window instead)."""
    _require_platform(actor)
    if UsageRecord.all_tenants.filter(sku=sku).exists():
        raise SkuConflict(f"SKU {sku.name} has priced usage: set its effective_to instead of deleting it")
    _audit(actor, "gpu_sku.delete", sku, snapshot(sku, GpuSku.AUDIT_FIELDS), None)
    sku.delete()
