"""Queues, cohorts, priority classes and reservations: every change goes through these functions.

Each write is transactional and leaves one audit row. Cohorts and priority classes are platform-level (audited
with no tenant); reservations are a tenant's but only platform staff set them. Errors are Django
`ValidationError`s naming the field, or `PermissionError` (HTTP 403).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.core import fastjson
from apps.core.audit import audit_record, snapshot
from apps.core.bulk import bulk_set
from apps.core.deferred import execute_or_defer
from apps.core.periodic import nudge
from apps.core.prepared import PreparedRead
from apps.core.principal import Principal
from apps.tenants.models import Tenant

from .models import CPU, GPU, MEMORY, RESOURCES, Cohort, PreemptionPolicy, PriorityClass, Queue, Reservation
from .quantities import QuantityError, parse_quantity
from .selectors import resource_amount

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_QUOTA_KEYS = {"resource", "flavor", "nominal", "borrowingLimit", "lendingLimit"}
MAX_QUOTAS = 64
MAX_WEIGHT = 1_000_000
QUEUE_FIELDS = ("cohort", "weight", "quotas")
COHORT_FIELDS = ("description",)
PRIORITY_CLASS_FIELDS = ("value", "preemption_policy", "description", "is_default")
RESERVATION_FIELDS = ("gpu_type", "count", "start_at", "end_at", "description")
RECONCILE_RESERVATIONS = "reconcile-reservations"  # claims follow a change at once rather than at the next tick
_TYPES = {Cohort: "cohort", Queue: "queue", PriorityClass: "priority_class", Reservation: "reservation"}


def _audit(actor: Principal, action: str, obj: Any, before: Any, after: Any) -> None:
    tenant = getattr(obj, "tenant", None) if isinstance(obj, Queue | Reservation) else None
    audit_record(
        actor=actor,
        action=action,
        obj=obj,
        object_type=_TYPES[type(obj)],
        object_id=str(obj.pk) if isinstance(obj, Reservation) else obj.name,
        tenant_id=tenant.pk if tenant is not None else None,
        tenant_slug=tenant.slug if tenant is not None else "",
        before=before,
        after=after,
    )


def _require_platform(actor: Principal, what: str) -> None:
    if not actor.is_platform:
        raise PermissionError(f"only platform staff can create, change or delete {what}")


def _reject_unknown(changes: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValidationError({name: "unknown field, or one that cannot be changed" for name in unknown})


def _full_clean(obj: Any, exclude: list[str] | None = None) -> None:
    obj.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)


# --- quotas ----------------------------------------------------------------------------------------------------


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
    others = Queue.all_tenants.filter(tenant_id=tenant.pk).exclude(pk=exclude_queue_id).values_list("quotas", flat=True)
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


# --- queues ----------------------------------------------------------------------------------------------------


@transaction.atomic
def queue_create(
    *,
    actor: Principal,
    tenant: Tenant,
    name: str,
    cohort: Cohort | None = None,
    weight: float = 1.0,
    quotas: list[dict[str, Any]] | None = None,
) -> Queue:
    """Create a queue in `tenant`. Its quota, with the tenant's other queues', must fit the tenant's ceilings."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serializes ceiling checks per tenant
    queue = Queue(tenant=tenant, name=name, cohort=cohort, weight=_check_weight(weight), quotas=validate_quotas(quotas))
    _full_clean(queue, exclude=["tenant"])
    check_tenant_ceilings(tenant=tenant, quotas=queue.quotas)
    try:
        with transaction.atomic():
            queue.save()
    except IntegrityError as exc:
        raise ValidationError({"name": f"a queue named {name!r} already exists in tenant {tenant.slug}"}) from exc
    _audit(actor, "queue.create", queue, None, snapshot(queue, Queue.AUDIT_FIELDS))
    return queue


@transaction.atomic
def queue_update(*, actor: Principal, queue: Queue, **changes: Any) -> Queue:
    """Change `cohort`, `weight` or `quotas`; bumps `generation`. The name never changes."""
    _reject_unknown(changes, QUEUE_FIELDS)
    tenant = Tenant.objects.select_for_update().get(pk=queue.tenant_id)
    queue = Queue.all_tenants.select_for_update(of=("self",)).select_related("cohort").get(pk=queue.pk)
    queue.tenant = tenant
    before = snapshot(queue, Queue.AUDIT_FIELDS)
    if "weight" in changes:
        queue.weight = _check_weight(changes["weight"])
    if "quotas" in changes:
        queue.quotas = validate_quotas(changes["quotas"])
        check_tenant_ceilings(tenant=tenant, quotas=queue.quotas, exclude_queue_id=queue.pk)
    if "cohort" in changes:
        queue.cohort = changes["cohort"]
    after = snapshot(queue, Queue.AUDIT_FIELDS)
    if after == before:
        return queue
    queue.generation = F("generation") + 1
    queue.save()
    queue.refresh_from_db()
    _audit(actor, "queue.update", queue, before, after)
    return queue


@transaction.atomic
def queue_delete(*, actor: Principal, queue: Queue) -> None:
    """Delete a queue (its workloads are the admission cycle's concern: they stay pending without it)."""
    _audit(actor, "queue.delete", queue, snapshot(queue, Queue.AUDIT_FIELDS), None)
    queue.delete()


# --- cohorts ---------------------------------------------------------------------------------------------------


@transaction.atomic
def cohort_create(*, actor: Principal, name: str, description: str = "") -> Cohort:
    _require_platform(actor, "cohorts")
    cohort = Cohort(name=name, description=description)
    _full_clean(cohort)
    try:
        with transaction.atomic():
            cohort.save()
    except IntegrityError as exc:
        raise ValidationError({"name": f"cohort {name!r} already exists"}) from exc
    _audit(actor, "cohort.create", cohort, None, snapshot(cohort, Cohort.AUDIT_FIELDS))
    return cohort


@transaction.atomic
def cohort_update(*, actor: Principal, cohort: Cohort, **changes: Any) -> Cohort:
    _require_platform(actor, "cohorts")
    _reject_unknown(changes, COHORT_FIELDS)
    cohort = Cohort.objects.select_for_update().get(pk=cohort.pk)
    before = snapshot(cohort, Cohort.AUDIT_FIELDS)
    for field, value in changes.items():
        setattr(cohort, field, value)
    _full_clean(cohort)
    after = snapshot(cohort, Cohort.AUDIT_FIELDS)
    if after != before:
        cohort.save()
        _audit(actor, "cohort.update", cohort, before, after)
    return cohort


@transaction.atomic
def cohort_delete(*, actor: Principal, cohort: Cohort) -> None:
    """Delete a cohort; its queues (of any tenant) keep their own quota and stop borrowing and lending."""
    _require_platform(actor, "cohorts")
    _audit(actor, "cohort.delete", cohort, snapshot(cohort, Cohort.AUDIT_FIELDS), None)
    cohort.delete()


# --- priority classes ------------------------------------------------------------------------------------------


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
    priority_class = PriorityClass.objects.select_for_update().get(pk=priority_class.pk)
    before = snapshot(priority_class, PriorityClass.AUDIT_FIELDS)
    for field, value in changes.items():
        setattr(priority_class, field, value)
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


# --- reservations ----------------------------------------------------------------------------------------------


def _check_reservation(reservation: Reservation) -> None:
    if not isinstance(reservation.gpu_type, str) or not _LABEL_VALUE.match(reservation.gpu_type):
        raise ValidationError({"gpu_type": f"{reservation.gpu_type!r} is not a GPU type label value such as H100"})
    count = reservation.count
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValidationError({"count": "must be a positive integer"})
    for field in ("start_at", "end_at"):
        if not isinstance(getattr(reservation, field), dt.datetime):
            raise ValidationError({field: "is required (a date and time)"})
    if reservation.end_at <= reservation.start_at:
        raise ValidationError({"end_at": "must be after start_at"})
    _full_clean(reservation, exclude=["tenant"])


@transaction.atomic
def reservation_create(
    *,
    actor: Principal,
    tenant: Tenant,
    gpu_type: str,
    count: int,
    start_at: dt.datetime,
    end_at: dt.datetime,
    description: str = "",
) -> Reservation:
    """Reserve `count` GPUs of `gpu_type` for `tenant` in [start_at, end_at). Platform staff only."""
    _require_platform(actor, "reservations")
    reservation = Reservation(
        tenant=tenant, gpu_type=gpu_type, count=count, start_at=start_at, end_at=end_at, description=description
    )
    _check_reservation(reservation)
    reservation.save()
    _audit(actor, "reservation.create", reservation, None, snapshot(reservation, Reservation.AUDIT_FIELDS))
    nudge(RECONCILE_RESERVATIONS)
    return reservation


@transaction.atomic
def reservation_update(*, actor: Principal, reservation: Reservation, **changes: Any) -> Reservation:
    _require_platform(actor, "reservations")
    _reject_unknown(changes, RESERVATION_FIELDS)
    reservation = Reservation.all_tenants.select_for_update().select_related("tenant").get(pk=reservation.pk)
    before = snapshot(reservation, Reservation.AUDIT_FIELDS)
    for field, value in changes.items():
        setattr(reservation, field, value)
    _check_reservation(reservation)
    after = snapshot(reservation, Reservation.AUDIT_FIELDS)
    if after != before:
        reservation.save()
        _audit(actor, "reservation.update", reservation, before, after)
        nudge(RECONCILE_RESERVATIONS)
    return reservation


@transaction.atomic
def reservation_delete(*, actor: Principal, reservation: Reservation) -> None:
    from apps.billing import services as billing

    _require_platform(actor, "reservations")
    _audit(actor, "reservation.delete", reservation, snapshot(reservation, Reservation.AUDIT_FIELDS), None)
    billing.usage_reservation_deleted(reservation=reservation)  # its usage record ends now and is sealed
    reservation.delete()
    nudge(RECONCILE_RESERVATIONS)


_QUEUE_STATUS = PreparedRead(
    lambda: Queue.all_tenants.values_list("pk", "tenant_id", "name", "status_admitted", "status_pending")
)


def queue_status_sync(
    *, admitted: dict[tuple[int, str], dict[str, int]], pending: dict[tuple[int, str], int]
) -> int | None:
    """Record each queue's admitted usage and waiting count after an admission cycle (only rows that changed; a
    queue named in neither map has none). Returns how many rows changed (None: inside a reconcile pass on
    PostgreSQL, sent with the pass's other writes, apps.core.deferred).

    Status, written by the admission cycle only (not audited: it is observed state, not a change anyone made). On
    PostgreSQL one UPDATE compares and writes (`_QUEUE_STATUS_SQL`); elsewhere one read, then one bulk write.
    """
    now = timezone.now()
    if connection.vendor == "postgresql":
        keys = admitted.keys() | pending.keys()
        values = [{"t": t, "n": n, "a": admitted.get((t, n), {}), "p": pending.get((t, n), 0)} for t, n in sorted(keys)]
        return execute_or_defer(_QUEUE_STATUS_SQL, [now, fastjson.compact(values, fastjson.not_json)])
    changed: dict[int, dict[str, Any]] = {}
    for pk, tenant_id, name, status_admitted, status_pending in _QUEUE_STATUS.rows():  # compiled once: every cycle
        usage, waiting = admitted.get((tenant_id, name), {}), pending.get((tenant_id, name), 0)
        if status_admitted != usage or status_pending != waiting:
            changed[pk] = {"status_admitted": usage, "status_pending": waiting, "status_updated_at": now}
    bulk_set(Queue, changed)
    return len(changed)


# Every queue's new status from one JSON parameter (queues it leaves out: nothing admitted, none waiting), written
# only where it differs. Its columns leave the queue table's epoch alone (apps.core.epochs).
_QUEUE_STATUS_SQL = """
UPDATE queueing_queue AS q
SET status_admitted = x.a, status_pending = x.p, status_updated_at = %s
FROM (
    SELECT q2.id, COALESCE(v.a, '{}'::jsonb) AS a, COALESCE(v.p, 0) AS p
    FROM queueing_queue AS q2
    LEFT JOIN json_to_recordset(%s::json) AS v(t bigint, n text, a jsonb, p integer)
        ON q2.tenant_id = v.t AND q2.name = v.n
) AS x
WHERE q.id = x.id AND (q.status_admitted IS DISTINCT FROM x.a OR q.status_pending IS DISTINCT FROM x.p)
"""
