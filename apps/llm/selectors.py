"""Read access to inference services and model aliases: a principal sees its own tenants' and the shared ones.

Names are unique within a tenant and among shared objects, so a tenant's service may have the name of a shared
one. A name then resolves as routing does: in a request that acts in one tenant, that tenant's object first, then
the shared one; with no tenant named (platform staff, or a user of several tenants), the shared object first, then
the one tenant object of that name.

Gateway usage is read from the hourly roll-ups (`llm_usage_report`): an hour is the finest granularity.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from apps.core.principal import Principal
from apps.core.scoping import ALL_TENANTS, Scope

from .models import InferenceService, LlmUsageHourly, ModelAlias

__all__ = [
    "MODELS_READ",
    "USAGE_GROUPS",
    "USAGE_GROUP_KEYS",
    "USAGE_METRICS",
    "UsageReport",
    "inference_service_get_visible",
    "inference_services_visible",
    "llm_usage_report",
    "model_alias_get_visible",
    "model_aliases_visible",
    "resolve_name",
]

MODELS_READ = "models:read"


def _visible(queryset: QuerySet, principal: Principal, tenants: Scope | None) -> QuerySet:
    tenants = principal.tenants_with(MODELS_READ) if tenants is None else tenants
    queryset = queryset.select_related("tenant")
    if tenants is ALL_TENANTS:
        return queryset
    if not tenants:
        return queryset.none()
    return queryset.filter(Q(tenant_id__in=tenants) | Q(tenant__isnull=True))


def inference_services_visible(*, principal: Principal, tenants: Scope | None = None) -> QuerySet[InferenceService]:
    """The services of the tenants in which `principal` holds `models:read` (or of `tenants`, a narrower set the
    request chose), and the shared ones. Platform staff see every service."""
    return _visible(InferenceService.objects.all(), principal, tenants)


def model_aliases_visible(*, principal: Principal, tenants: Scope | None = None) -> QuerySet[ModelAlias]:
    """Model aliases, visible as `inference_services_visible` says."""
    return _visible(ModelAlias.objects.all(), principal, tenants)


def resolve_name(queryset: QuerySet, *, name: str, tenant_id: int | None):
    """The object named `name` in `queryset` (see the module docstring), or None.

    Raises:
        ValidationError: no tenant was named and several tenants have an object of that name.
    """
    matches = queryset.filter(name=name)
    if tenant_id is not None:
        own_first = F("tenant_id").asc(nulls_last=True)
        return matches.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True)).order_by(own_first).first()
    rows = list(matches.order_by(F("tenant_id").asc(nulls_first=True))[:2])
    if not rows:
        return None
    if rows[0].tenant_id is None or len(rows) == 1:
        return rows[0]
    raise ValidationError(
        {"tenant": [f"several tenants have one named {name!r}: name the tenant with X-Gryvia-Tenant"]}
    )


def inference_service_get_visible(
    *, principal: Principal, name: str, tenants: Scope | None = None, tenant_id: int | None = None
) -> InferenceService | None:
    """The service `name` as `principal` sees it (in `tenant_id` first, when the request acts in one tenant)."""
    return resolve_name(
        inference_services_visible(principal=principal, tenants=tenants), name=name, tenant_id=tenant_id
    )


def model_alias_get_visible(
    *, principal: Principal, name: str, tenants: Scope | None = None, tenant_id: int | None = None
) -> ModelAlias | None:
    return resolve_name(model_aliases_visible(principal=principal, tenants=tenants), name=name, tenant_id=tenant_id)


# --- gateway usage ----------------------------------------------------------------------------------------------

USAGE_GROUPS = ("tenant", "key", "model", "hour", "day")
USAGE_METRICS = ("requests", "errors", "input_tokens", "output_tokens", "total_tokens", "estimated_requests")
# The value each group field reads, as a row key of `llm_usage_report`'s rows ("tenant" is a field name, so the
# tenant's slug keeps its lookup name).
USAGE_GROUP_KEYS = {"tenant": "tenant__slug", "key": "key", "model": "model", "hour": "hour", "day": "day"}
_GROUP_EXPRESSIONS = {"key": F("key_id"), "day": TruncDate("hour", tzinfo=dt.UTC)}
_METRIC_SUMS = {
    "requests": Sum("requests"),
    "errors": Sum("errors"),
    "input_tokens": Sum("input_tokens"),
    "output_tokens": Sum("output_tokens"),
    "estimated_requests": Sum("estimated_requests"),
}


@dataclass(frozen=True)
class UsageReport:
    """Usage in a window: `rows` (a lazy, ordered queryset of dicts, one per group: the `USAGE_GROUP_KEYS` of the
    grouped fields and the `USAGE_METRICS`) and `totals` (the metrics over the whole window)."""

    start: dt.datetime
    end: dt.datetime
    group_by: tuple[str, ...]
    rows: QuerySet
    totals: dict[str, int]


def _hour_floor(value: dt.datetime) -> dt.datetime:
    return value.replace(minute=0, second=0, microsecond=0)


def llm_usage_report(
    *,
    tenants: Scope,
    start: dt.datetime,
    end: dt.datetime,
    group_by: Sequence[str] = ("day", "model"),
    model: str | None = None,
    key_id: str | None = None,
    tenant_slug: str | None = None,
) -> UsageReport:
    """Gateway usage of `tenants` (a principal's scope, or ALL_TENANTS) from the hourly roll-ups.

    An hour counts when it overlaps [start, end): `start` is rounded down to its hour, and an hour that began
    before `end` is counted whole. `model`, `key_id` and `tenant_slug` narrow the rows further; a tenant outside
    `tenants` simply has no rows. Rows are ordered by the group fields, in the order of `group_by`.

    Raises:
        ValidationError: an unknown or empty `group_by`, naive datetimes, or `end` not after `start`.
    """
    group_by = tuple(dict.fromkeys(group_by))  # repeated names count once
    unknown = [name for name in group_by if name not in USAGE_GROUPS]
    if unknown or not group_by:
        what = f"unknown {', '.join(map(repr, unknown))}" if unknown else "empty"
        raise ValidationError({"group_by": [f"{what}: use a comma-separated list of {', '.join(USAGE_GROUPS)}"]})
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationError({"start": ["start and end must be timezone-aware"]})
    if end <= start:
        raise ValidationError({"end": [f"must be after start ({start.isoformat()}); got {end.isoformat()}"]})

    hourly = LlmUsageHourly.objects.filter(hour__gte=_hour_floor(start), hour__lt=end)
    if tenants is not ALL_TENANTS:
        hourly = hourly.filter(tenant_id__in=tenants)
    if model:
        hourly = hourly.filter(model=model)
    if key_id:
        hourly = hourly.filter(key_id=key_id)
    if tenant_slug:
        hourly = hourly.filter(tenant__slug=tenant_slug)

    keys = [USAGE_GROUP_KEYS[name] for name in group_by]
    plain = [USAGE_GROUP_KEYS[name] for name in group_by if name not in _GROUP_EXPRESSIONS]
    computed = {USAGE_GROUP_KEYS[name]: _GROUP_EXPRESSIONS[name] for name in group_by if name in _GROUP_EXPRESSIONS}
    # The sums take the fields' names, so the total is added after them (and F() then means the sums).
    rows = (
        hourly.values(*plain, **computed)
        .annotate(**_METRIC_SUMS)
        .annotate(total_tokens=F("input_tokens") + F("output_tokens"))
        .order_by(*keys)
    )
    sums: dict[str, Any] = hourly.aggregate(**_METRIC_SUMS)
    totals = {name: int(sums[name] or 0) for name in _METRIC_SUMS}
    totals["total_tokens"] = totals["input_tokens"] + totals["output_tokens"]
    totals = {name: totals[name] for name in USAGE_METRICS}
    return UsageReport(start=start, end=end, group_by=group_by, rows=rows, totals=totals)
