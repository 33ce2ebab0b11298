"""Queue quota validation and the tenant ceilings that all of a tenant's queues together must stay within."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from django.core.exceptions import ValidationError

from apps.core.quantities import QuantityError, parse_quantity
from apps.core.scoping import tenant_scope
from apps.tenants.models import Tenant

from ..choices import CPU, GPU, MEMORY, RESOURCES
from ..models import Queue
from ..selectors import resource_amount
from ._common import _LABEL_VALUE

_QUOTA_KEYS = {"resource", "flavor", "nominal", "borrowingLimit", "lendingLimit"}
MAX_QUOTAS = 64
MAX_WEIGHT = 1_000_000


def _amount(resource: str, value: Any, where: str) -> int | str:
    """A GPU count (int) or a cpu/memory quantity (kept as its string), checked non-negative."""
    if resource == GPU:
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationError({"quotas": f"{where}: GPU quantities must be non-negative integers (got {value!r})"})
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValidationError({"quotas": f"{where}: must be a Kubernetes quantity such as 64, 500m or 256Gi"})
    try:
        parsed = parse_quantity(value)
    except QuantityError as exc:
        raise ValidationError({"quotas": f"{where}: {exc}"}) from exc
    if parsed < 0:
        raise ValidationError({"quotas": f"{where}: must not be negative (got {value!r})"})
    return value if isinstance(value, str) else str(value)


def validate_quotas(quotas: Any) -> list[dict[str, Any]]:
    """Normalize a queue's quota list; every error names `quotas` and the entry (`quotas[1].flavor: ...`)."""
    if quotas is None:
        return []
    if not isinstance(quotas, list):
        raise ValidationError({"quotas": "must be a list of {resource, flavor, nominal, borrowingLimit, lendingLimit}"})
    if len(quotas) > MAX_QUOTAS:
        raise ValidationError({"quotas": f"at most {MAX_QUOTAS} entries"})
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(quotas):
        where = f"quotas[{index}]"
        if not isinstance(entry, dict):
            raise ValidationError({"quotas": f"{where}: must be a mapping"})
        unknown = sorted(set(entry) - _QUOTA_KEYS)
        if unknown:
            raise ValidationError({"quotas": f"{where}: unknown field(s) {', '.join(unknown)}"})
        resource = entry.get("resource")
        if resource not in RESOURCES:
            raise ValidationError(
                {"quotas": f"{where}.resource: must be one of {', '.join(RESOURCES)} (got {resource!r})"}
            )
        flavor = entry.get("flavor") or ""
        if flavor and resource != GPU:
            raise ValidationError({"quotas": f"{where}.flavor: only {GPU} quotas have a flavor (GPU type)"})
        if flavor and (not isinstance(flavor, str) or not _LABEL_VALUE.match(flavor)):
            raise ValidationError({"quotas": f"{where}.flavor: {flavor!r} is not a GPU type label value such as H100"})
        if (resource, flavor) in seen:
            label = f"{resource} flavor {flavor!r}" if flavor else resource
            raise ValidationError({"quotas": f"{where}: duplicate quota for {label}"})
        seen.add((resource, flavor))
        if "nominal" not in entry:
            raise ValidationError({"quotas": f"{where}.nominal: is required"})
        normalized: dict[str, Any] = {"resource": resource, "flavor": flavor}
        normalized["nominal"] = _amount(resource, entry["nominal"], f"{where}.nominal")
        for key in ("borrowingLimit", "lendingLimit"):
            value = entry.get(key)
            normalized[key] = None if value is None else _amount(resource, value, f"{where}.{key}")
        lending = normalized["lendingLimit"]
        if lending is not None and resource_amount(resource, lending) > resource_amount(
            resource, normalized["nominal"]
        ):
            raise ValidationError({"quotas": f"{where}.lendingLimit: cannot exceed nominal"})
        out.append(normalized)
    return out


def _totals(quota_lists: list[list[dict[str, Any]]]) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for quotas in quota_lists:
        for entry in quotas:
            amount = resource_amount(entry["resource"], entry["nominal"])
            totals[(entry["resource"], entry["flavor"])] += amount
            if entry["resource"] == GPU:
                totals[(GPU, "*")] += amount
    return totals


def check_tenant_ceilings(*, tenant: Tenant, quotas: list[dict[str, Any]], exclude_queue_id: int | None = None) -> None:
    """The tenant's queues together (with `quotas` in place of queue `exclude_queue_id`) stay within its ceilings.

    `max_gpus` bounds all GPU quota, each `gpu_type_ceilings` entry the quota of that flavor, `max_cpu` and
    `max_memory` the cpu and memory quota. Raises ValidationError naming `quotas`.
    """
    with tenant_scope(tenant):
        others = Queue.objects.exclude(pk=exclude_queue_id).values_list("quotas", flat=True)
    totals = _totals([*others, quotas])
    problems = []
    if tenant.max_gpus is not None and totals[(GPU, "*")] > tenant.max_gpus:
        problems.append(
            f"GPU quota of all queues would be {totals[(GPU, '*')]}, above the tenant's max_gpus {tenant.max_gpus}"
        )
    for flavor, ceiling in sorted((tenant.gpu_type_ceilings or {}).items()):
        if totals[(GPU, flavor)] > int(ceiling):
            problems.append(
                f"{flavor} GPU quota of all queues would be {totals[(GPU, flavor)]}, above its ceiling {ceiling}"
            )
    for resource, ceiling in ((CPU, tenant.max_cpu), (MEMORY, tenant.max_memory)):
        if ceiling and totals[(resource, "")] > resource_amount(resource, ceiling):
            problems.append(f"{resource} quota of all queues would exceed the tenant's max_{resource} {ceiling}")
    if problems:
        raise ValidationError({"quotas": problems})


def _check_weight(weight: Any) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
        raise ValidationError({"weight": "must be a number"})
    if not 0 < weight <= MAX_WEIGHT:
        raise ValidationError({"weight": f"must be greater than 0 and at most {MAX_WEIGHT}"})
    return float(weight)
