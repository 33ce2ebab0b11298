"""Cost estimate before submission: what a job would cost at the catalog's prices in force now, and the cheapest
GPU type that would run it.

The job is priced exactly as its run would be metered (apps.billing.services.runs `_open`): the gang's whole request
(GPUs, CPU cores, memory GiB) at the SKU of its GPU type (`any` when it names none, `cpu` without whole GPUs),
for its timeout, or `GRYVIA_BILLING_DEFAULT_DURATION_S` when it has none. Other GPU types are compared with the
same GPU count, cores and memory, in the same currency.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from ..models import CPU_GPU_TYPE, GpuSku
from . import pricing

ANY_GPU_TYPE = "any"
_GIB = Decimal(2**30)


@dataclass(frozen=True)
class PricedOption:
    """One GPU type priced for the job: its SKU, rate per GPU-hour and the whole cost."""

    gpu_type: str
    sku: str
    rate: Decimal
    cost: Decimal
    currency: str


@dataclass(frozen=True)
class CostEstimate:
    """What a job would cost (`cost` in `currency`, at `sku`'s rates) and the cheaper GPU types, if any."""

    gpus: int
    gpu_type: str  # the type priced: the job's, `any` or `cpu`
    cpu_cores: Decimal
    memory_gib: Decimal
    duration_seconds: int
    duration_source: str  # "timeout" or "default"
    at: dt.datetime
    sku: str | None
    rate: Decimal
    gpu_hours: Decimal
    cost: Decimal
    currency: str
    cheapest: PricedOption | None  # the cheapest GPU type in force (may be the job's own)
    alternative: PricedOption | None  # a job naming a GPU type: the cheapest other type
    message: str


def _option(sku: GpuSku, *, gpus: int, cpu_cores: Decimal, memory_gib: Decimal, hours: Decimal) -> PricedOption:
    _, cost = pricing.cost_of(sku=sku, gpus=gpus, cpu_cores=cpu_cores, memory_gib=memory_gib, hours=hours)
    return PricedOption(gpu_type=sku.gpu_type, sku=sku.name, rate=sku.hourly_rate, cost=cost, currency=sku.currency)


def _hours_text(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"


def _amounts(request: dict[str, int]) -> tuple[int, Decimal, Decimal]:
    """(GPUs, CPU cores, memory GiB) of an admission request, as a run of it is metered."""
    gpus = int(request.get("nvidia.com/gpu") or 0)
    cpu_cores = Decimal(int(request.get("cpu") or 0)) / 1000
    memory_gib = (Decimal(int(request.get("memory") or 0)) / _GIB).quantize(Decimal("0.001"))
    return gpus, cpu_cores, memory_gib


def _priced_type(gpus: int, gpu_type: str) -> str:
    named = (gpu_type or "").strip()
    if not gpus:
        return CPU_GPU_TYPE
    return named if named and named.lower() != ANY_GPU_TYPE else ANY_GPU_TYPE


def _duration(timeout_seconds: int | None) -> tuple[int, str]:
    if timeout_seconds:
        return int(timeout_seconds), "timeout"
    return int(settings.GRYVIA_BILLING_DEFAULT_DURATION_S), "default"


def forecast_cost(
    *, catalog: pricing.Catalog, request: dict[str, int], gpu_type: str, timeout_seconds: int | None, at: dt.datetime
) -> tuple[Decimal, str]:
    """(cost, currency) of a job run for its timeout (or the default duration) at the SKU in force at `at`: what
    admission checks hard budgets with. The same price as `cost_estimate`'s, without the alternatives."""
    gpus, cpu_cores, memory_gib = _amounts(request)
    sku = catalog.in_force(_priced_type(gpus, gpu_type), at)
    if sku is None:
        return pricing.ZERO, pricing.DEFAULT_CURRENCY
    hours = Decimal(_duration(timeout_seconds)[0]) / Decimal(3600)
    _, cost = pricing.cost_of(sku=sku, gpus=gpus, cpu_cores=cpu_cores, memory_gib=memory_gib, hours=hours)
    return cost, sku.currency


def cost_estimate(
    *,
    request: dict[str, int],
    gpu_type: str,
    timeout_seconds: int | None,
    at: dt.datetime | None = None,
) -> CostEstimate:
    """Price a job from its admission request (`nvidia.com/gpu`, `cpu` in millicores, `memory` in bytes, as the
    jobs app computes it) and its named GPU type ("" or `any`: none), for its timeout or the default duration."""
    at = (at or timezone.now()).replace(microsecond=0)
    gpus, cpu_cores, memory_gib = _amounts(request)
    duration, source = _duration(timeout_seconds)
    hours = Decimal(duration) / Decimal(3600)
    priced_type = _priced_type(gpus, gpu_type)
    catalog = pricing.Catalog()
    sku = catalog.in_force(priced_type, at)
    gpu_hours, cost = pricing.cost_of(sku=sku, gpus=gpus, cpu_cores=cpu_cores, memory_gib=memory_gib, hours=hours)
    currency = sku.currency if sku else pricing.DEFAULT_CURRENCY

    cheapest = alternative = None
    if gpus:
        options = sorted(
            (
                _option(candidate, gpus=gpus, cpu_cores=cpu_cores, memory_gib=memory_gib, hours=hours)
                for candidate in catalog.all_in_force(at)
                if candidate.gpu_type.lower() not in (CPU_GPU_TYPE, ANY_GPU_TYPE) and candidate.currency == currency
            ),
            key=lambda option: (option.cost, option.gpu_type.lower()),
        )
        cheapest = options[0] if options else None
        if priced_type != ANY_GPU_TYPE:
            alternative = next((o for o in options if o.gpu_type.lower() != priced_type.lower()), None)

    what = f"{gpus} × {priced_type} GPU{'s' if gpus > 1 else ''}" if gpus else f"{cpu_cores.normalize():f} CPU cores"
    span = f"{_hours_text(duration)} ({'the job timeout' if source == 'timeout' else 'no timeout: default duration'})"
    if sku is None:
        message = f"no SKU of type {priced_type!r} is in force: {what} for {span} would be metered at cost 0"
    else:
        message = f"{what} for {span} at SKU {sku.name}: {cost} {currency}"
    if cheapest is not None and cheapest.gpu_type.lower() != priced_type.lower() and cheapest.cost < cost:
        message += f"; cheapest: {gpus} × {cheapest.gpu_type} at {cheapest.cost} {currency} (SKU {cheapest.sku})"
    elif alternative is not None:
        message += f"; the cheapest other type, {alternative.gpu_type}, would cost {alternative.cost} {currency}"
    return CostEstimate(
        gpus=gpus,
        gpu_type=priced_type,
        cpu_cores=cpu_cores,
        memory_gib=memory_gib,
        duration_seconds=duration,
        duration_source=source,
        at=at,
        sku=sku.name if sku else None,
        rate=sku.hourly_rate if sku else pricing.ZERO,
        gpu_hours=gpu_hours,
        cost=cost,
        currency=currency,
        cheapest=cheapest,
        alternative=alternative,
        message=message,
    )


class Forecaster:
    """Forecast costs (`forecast_cost`) of many runs at one instant, from the cached catalog: what the admission
    cycle prices jobs with, with no query while the cache holds. Runs asking the same are priced once."""

    def __init__(self, at: dt.datetime, catalog: pricing.Catalog | None = None) -> None:
        self.at = at
        self.catalog = catalog or pricing.Catalog.cached()
        self._memo: dict[tuple, tuple[Decimal, str]] = {}

    def __call__(self, request: dict[str, int], timeout_seconds: int | None) -> tuple[Decimal, str]:
        """(cost, currency) of a run with this admission request (`nvidia.com/gpu:<TYPE>` names its GPU type)."""
        key = (*sorted(request.items()), timeout_seconds)
        found = self._memo.get(key)
        if found is None:
            typed = next((k.split(":", 1)[1] for k in request if k.startswith("nvidia.com/gpu:")), "")
            found = self._memo[key] = forecast_cost(
                catalog=self.catalog, request=request, gpu_type=typed, timeout_seconds=timeout_seconds, at=self.at
            )
        return found
