"""Reservations billed as usage: the GPUs a reservation holds for its tenant, over the time it holds them.

A reservation's usage record (kind `reservation`, job `reservation:<id>`, names `reservation-<id>`, then
`reservation-<id>-2`, ...) bills the GPUs on the nodes claimed for it (`status_claimed_gpus`: whole nodes, what
the tenant gets) at the rate of the SKU of its GPU type in force when the record opens. It opens when the window
starts and the claims are in place, is refreshed while the reservation is active, and becomes final, sealed into
the ledger like a job run, when the window ends, when the reservation is deleted, or when its claimed GPUs change
(a new record then continues with the new count, from the moment the reservation reconciler wrote it). A record
is also split at the start of each UTC month, so each month's usage (and invoice) holds its share.

Jobs on reserved GPUs are not billed twice: a run whose pods were placed on nodes its tenant's reservation holds
records those GPUs as `reserved_gpus`, priced at zero (the reservation's record bills them). When the tenant no
longer has any reservation billed, such a run continues in a new record (its next run number) billed in full.

`usage_reservations_sync` runs after every reservation pass (apps.queueing.reservations) and in the periodic
`refresh-usage`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.core.db.bulk import bulk_set
from apps.queueing import selectors as queueing

from ..choices import UsageKind
from ..models import UsageRecord
from ..selectors import pricing
from ..selectors.spend import month_of
from .runs import close_records


def _whole(moment: dt.datetime) -> dt.datetime:
    return moment.replace(microsecond=0)


def _clamp(moment: dt.datetime, low: dt.datetime, high: dt.datetime) -> dt.datetime:
    return min(max(moment, low), high)


def _billed_gpus(reservation: Any, now: dt.datetime) -> int:
    active = reservation.start_at <= now < reservation.end_at and reservation.tenant.archived_at is None
    return int(reservation.status_claimed_gpus or 0) if active else 0


def _records(pairs: list[tuple[Any, dt.datetime, int]], runs: dict[int, int], catalog: pricing.Catalog) -> list:
    rows = []
    for reservation, start, gpus in pairs:
        run = runs.get(reservation.pk, 0) + 1
        runs[reservation.pk] = run
        sku = catalog.in_force(reservation.gpu_type, start)
        rows.append(
            UsageRecord(
                tenant_id=reservation.tenant_id,
                name=f"reservation-{reservation.pk}" if run == 1 else f"reservation-{reservation.pk}-{run}",
                kind=UsageKind.RESERVATION,
                reservation_pk=reservation.pk,
                job_name=f"reservation:{reservation.pk}",
                run=run,
                sku=sku,
                sku_name=sku.name if sku else "",
                gpu_type=reservation.gpu_type,
                gpus=gpus,
                start=start,
                rate=sku.hourly_rate if sku else 0,
                currency=sku.currency if sku else pricing.DEFAULT_CURRENCY,
                refreshed_at=start,
            )
        )
    return rows


def _release_runs(tenant_ids: set[int], at: dict[int, dt.datetime], now: dt.datetime) -> int:
    """Open job runs on reserved GPUs of tenants left without a billed reservation: each ends at the moment the
    last one stopped and continues, billed in full, in a new record."""
    if not tenant_ids:
        return 0
    still = set(
        UsageRecord.all_tenants.filter(kind=UsageKind.RESERVATION, final=False, tenant_id__in=tenant_ids)
        .values_list("tenant_id", flat=True)
        .distinct()
    )
    runs = list(
        UsageRecord.all_tenants.filter(
            tenant_id__in=tenant_ids - still, final=False, reserved_gpus__gt=0, job_pk__isnull=False
        ).select_related("tenant", "sku")
    )
    if not runs:
        return 0
    close_records([(r, at[r.tenant_id]) for r in runs], now)
    fresh = []
    for record in runs:
        start = max(_whole(at[record.tenant_id]), record.start)
        fields = {f.attname: getattr(record, f.attname) for f in UsageRecord._meta.concrete_fields}
        for key in ("id", "uid", "end", "final", "created_at"):
            fields.pop(key)
        fields.update(
            name=f"usage-{record.job_uid}-{record.run + 1}",
            run=record.run + 1,
            reserved_gpus=0,
            start=start,
            refreshed_at=start,
            gpu_hours=0,
            cost=0,
        )
        fresh.append(UsageRecord(**fields))
    UsageRecord.all_tenants.bulk_create(fresh)
    return len(fresh)


def usage_reservations_sync(*, now: dt.datetime | None = None) -> int:
    """Open, refresh, split and close reservations' usage records to match what each holds now. Returns how many
    records it opened or closed."""
    now = _whole(now or timezone.now())
    open_records = {
        r.reservation_pk: r
        for r in UsageRecord.all_tenants.filter(kind=UsageKind.RESERVATION, final=False).select_related("tenant", "sku")
    }
    reservations = {r.pk: r for r in queueing.reservations_billable(now=now, ids=set(open_records))}
    month_start = month_of(now)[0]
    closing: list[tuple[UsageRecord, dt.datetime]] = []
    opening: list[tuple[Any, dt.datetime, int]] = []
    for pk, record in open_records.items():
        reservation = reservations.get(pk)
        if reservation is None:  # deleted without the service (it closes its record itself): ends now
            closing.append((record, now))
            continue
        gpus = _billed_gpus(reservation, now)
        if gpus == 0 and not reservation.start_at <= now < reservation.end_at:
            closing.append((record, _clamp(reservation.end_at, record.start, now)))
        elif gpus != record.gpus:
            changed = _clamp(_whole(reservation.status_updated_at or now), record.start, now)
            closing.append((record, changed))
            if gpus:
                opening.append((reservation, changed, gpus))
        elif record.start < month_start:
            closing.append((record, month_start))
            opening.append((reservation, month_start, gpus))
    for pk, reservation in reservations.items():
        gpus = _billed_gpus(reservation, now)
        if pk not in open_records and gpus:
            claimed = _whole(reservation.status_updated_at or reservation.start_at)
            opening.append((reservation, _clamp(claimed, reservation.start_at, now), gpus))
    closed = {record.reservation_pk for record, _at in closing}
    with transaction.atomic():
        close_records(closing, now)
        if opening:
            ids = [reservation.pk for reservation, _s, _g in opening]
            runs = dict(
                UsageRecord.all_tenants.filter(reservation_pk__in=ids)
                .values("reservation_pk")
                .annotate(last=Max("run"))
                .values_list("reservation_pk", "last")
            )
            # A new record never starts before the last one of its reservation ended.
            ends = dict(
                UsageRecord.all_tenants.filter(reservation_pk__in=ids, final=True)
                .values("reservation_pk")
                .annotate(last=Max("end"))
                .values_list("reservation_pk", "last")
            )
            opening = [(r, max(start, ends.get(r.pk) or start), gpus) for r, start, gpus in opening]
            fresh = _records(opening, runs, pricing.Catalog())
            for row, (reserved, _start, _gpus) in zip(fresh, opening, strict=True):  # priced up to now at once
                priced = pricing.price(row, end=max(min(now, reserved.end_at), row.start))
                row.gpu_hours, row.cost = priced["gpu_hours"], priced["cost"]
                row.refreshed_at = now
            UsageRecord.all_tenants.bulk_create(fresh)
        last_stop: dict[int, dt.datetime] = {}
        for record, at in closing:
            last_stop[record.tenant_id] = max(last_stop.get(record.tenant_id, at), at)
        released = _release_runs(set(last_stop), last_stop, now)
        changes = {}
        for pk, record in open_records.items():
            if pk not in closed:
                upto = max(min(now, reservations[pk].end_at), record.start)
                changes[record.pk] = {**pricing.price(record, end=upto), "refreshed_at": now}
        bulk_set(UsageRecord, changes, exclude={"final": [True]})
    return len(closing) + len(opening) + released


def usage_reservation_deleted(*, reservation: Any, now: dt.datetime | None = None) -> None:
    """The reservation is being deleted: its open record ends now (or at its window's end) and is sealed."""
    now = _whole(now or timezone.now())
    records = list(
        UsageRecord.all_tenants.filter(reservation_pk=reservation.pk, final=False).select_related("tenant", "sku")
    )
    with transaction.atomic():
        close_records([(r, _clamp(min(now, reservation.end_at), r.start, now)) for r in records], now)
        if records:
            _release_runs({reservation.tenant_id}, {reservation.tenant_id: now}, now)
