"""Draining the outbox: claim due deliveries, POST them through the address guard, record every attempt.

One pass (`deliver_webhooks`, the periodic function the ticker and Celery beat run):
1. Claim, in a short transaction: due pending deliveries of enabled endpoints whose lease is free, with
   `SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL (concurrent workers take different rows; SQLite's writer lock
   serialises claims). A claim sets `locked_until` (the lease) and a claim token, counts the attempt and writes
   it `in_flight`. An attempt still in flight when its delivery is claimed again belonged to a worker that died:
   it becomes `abandoned`, and the delivery is simply sent again (at least once, same `webhook-id`).
2. Send, with no transaction open: a few at a time on threads that never touch the database.
3. Record each result with a compare-and-swap on the claim token: success ends the delivery; a failure schedules
   the next attempt (doubling with jitter) until the retry horizon, then fails it; the endpoint's run of failed
   deliveries is counted, and at GRYVIA_WEBHOOK_DISABLE_AFTER the endpoint is disabled (audited, and a
   `webhook.disabled` event goes to the tenant's other endpoints).
"""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.core import crypto, netguard

from . import payloads, signing
from .choices import AttemptStatus, DeliveryStatus
from .failures import endpoint_failures_record
from .models import Delivery, DeliveryAttempt

USER_AGENT = "gryvia-webhooks/1"


@dataclass
class Claimed:
    """What a worker needs to send one delivery, read while claiming (no database access after)."""

    delivery_id: int
    attempt_id: int
    number: int
    claim: str
    url: str
    body: bytes
    message_id: str
    secrets: list[str]


@dataclass
class Outcome:
    status: str
    status_code: int | None = None
    latency_ms: int | None = None
    error_code: str = ""
    error: str = ""
    excerpt: str = ""
    address: str = ""


@dataclass
class DrainStats:
    claimed: int = 0
    succeeded: int = 0
    retrying: int = 0
    failed: int = 0
    abandoned: int = 0
    disabled: list[int] = field(default_factory=list)


def backoff(attempt: int, *, rand: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): base·2^(n-1), capped, ±25 % jitter."""
    delay = min(settings.GRYVIA_WEBHOOK_RETRY_BASE_S * 2 ** (attempt - 1), settings.GRYVIA_WEBHOOK_RETRY_MAX_DELAY_S)
    return delay * (rand or random).uniform(0.75, 1.25)


def deliver_webhooks(*, now: dt.datetime | None = None, limit: int | None = None) -> DrainStats:
    """One bounded pass over due deliveries (the periodic entry point): up to `limit` (GRYVIA_WEBHOOK_BATCH)
    deliveries, claimed GRYVIA_WEBHOOK_CONCURRENCY at a time so the time budget is checked between rounds.
    `now` fixes the clock (tests); by default each round reads it."""
    stats = DrainStats()
    cap = limit or settings.GRYVIA_WEBHOOK_BATCH
    started = time.monotonic()
    while stats.claimed < cap and time.monotonic() - started < settings.GRYVIA_WEBHOOK_BUDGET_S:
        current = now or timezone.now()
        round_size = min(settings.GRYVIA_WEBHOOK_CONCURRENCY, cap - stats.claimed)
        batch = claim(now=current, limit=round_size, stats=stats)
        if not batch:
            break
        send_and_record(batch, now=current, stats=stats)
    return stats


def claim(
    *, now: dt.datetime, limit: int, stats: DrainStats | None = None, only_ids: list[int] | None = None
) -> list[Claimed]:
    """Lease up to `limit` due deliveries to this worker (see the module docstring)."""
    stats = stats if stats is not None else DrainStats()
    lease = now + dt.timedelta(seconds=settings.GRYVIA_WEBHOOK_LEASE_S)
    token = uuid.uuid4().hex
    free = Q(locked_until__isnull=True) | Q(locked_until__lte=now)
    with transaction.atomic():
        due = Delivery.all_tenants.filter(free, status=DeliveryStatus.PENDING, endpoint__enabled=True)
        due = due.filter(pk__in=only_ids) if only_ids is not None else due.filter(next_attempt_at__lte=now)
        if connection.features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True, of=("self",))
        pks = list(due.order_by("next_attempt_at", "id").values_list("pk", flat=True)[:limit])
        if not pks:
            return []
        Delivery.all_tenants.filter(free, pk__in=pks, status=DeliveryStatus.PENDING).update(
            locked_until=lease,
            claim=token,
            attempts=F("attempts") + 1,
            first_attempt_at=Coalesce("first_attempt_at", now),
        )
        rows = list(
            Delivery.all_tenants.filter(pk__in=pks, claim=token)
            .select_related("endpoint", "event", "tenant")
            .order_by("next_attempt_at", "id")
        )
        stats.abandoned += DeliveryAttempt.objects.filter(
            delivery_id__in=[d.pk for d in rows], status=AttemptStatus.IN_FLIGHT
        ).update(
            status=AttemptStatus.ABANDONED,
            error_code="worker_lost",
            error="the worker's lease ran out before it reported; sent again",
            finished_at=now,
        )
        attempts = DeliveryAttempt.objects.bulk_create(
            [DeliveryAttempt(delivery_id=d.pk, number=d.attempts, started_at=now) for d in rows]
        )
    stats.claimed += len(rows)
    return [_prepared(d, a, token, now) for d, a in zip(rows, attempts, strict=True)]


def _prepared(delivery: Delivery, attempt: DeliveryAttempt, token: str, now: dt.datetime) -> Claimed:
    endpoint, event = delivery.endpoint, delivery.event
    secrets = [crypto.decrypt(endpoint.secret_encrypted)]
    if (
        endpoint.previous_secret_encrypted
        and endpoint.previous_secret_expires_at
        and now < (endpoint.previous_secret_expires_at)
    ):
        secrets.append(crypto.decrypt(endpoint.previous_secret_encrypted))
    body = payloads.body(
        format=endpoint.format,
        event_id=event.event_id,
        type=event.type,
        created_at=event.created_at.isoformat().replace("+00:00", "Z"),
        tenant=delivery.tenant.slug,
        data=event.data,
    )
    return Claimed(
        delivery_id=delivery.pk,
        attempt_id=attempt.pk,
        number=delivery.attempts,
        claim=token,
        url=endpoint.url,
        body=body,
        message_id=delivery.message_id,
        secrets=secrets,
    )


def send(item: Claimed) -> Outcome:
    """POST one delivery through the guard. Never raises; never touches the database."""
    headers = signing.headers(item.secrets, message_id=item.message_id, timestamp=int(time.time()), body=item.body)
    headers["Content-Type"] = "application/json"
    started = time.monotonic()
    try:
        response = netguard.request(
            "POST",
            item.url,
            headers=headers,
            content=item.body,
            allow=netguard.networks(settings.GRYVIA_WEBHOOK_ALLOW_CIDRS),
            timeout_s=settings.GRYVIA_WEBHOOK_TIMEOUT_S,
            max_bytes=settings.GRYVIA_WEBHOOK_MAX_RESPONSE_BYTES,
            user_agent=USER_AGENT,
        )
    except netguard.AddressRefused as exc:
        return Outcome(status=AttemptStatus.REFUSED, error_code=exc.code, error=str(exc)[:500])
    except netguard.GuardError as exc:
        latency = int((time.monotonic() - started) * 1000)
        return Outcome(status=AttemptStatus.FAILED, latency_ms=latency, error_code=exc.code, error=str(exc)[:500])
    outcome = Outcome(
        status=AttemptStatus.SUCCEEDED if 200 <= response.status_code < 300 else AttemptStatus.FAILED,
        status_code=response.status_code,
        latency_ms=int(response.elapsed_s * 1000),
        excerpt=response.body[:1000].decode("utf-8", "replace")[:1000],
        address=response.address,
    )
    if response.status_code in netguard.REDIRECTS:
        outcome.error_code = "redirect"
        outcome.error = f"redirects are not followed (to {response.headers.get('location', '?')[:300]})"
    elif outcome.status == AttemptStatus.FAILED:
        outcome.error_code = "http_status"
        outcome.error = f"the receiver answered {response.status_code}"
    return outcome


def send_and_record(batch: list[Claimed], *, now: dt.datetime, stats: DrainStats) -> None:
    if len(batch) == 1:
        outcomes = [send(batch[0])]
    else:
        with ThreadPoolExecutor(max_workers=min(settings.GRYVIA_WEBHOOK_CONCURRENCY, len(batch))) as pool:
            outcomes = list(pool.map(send, batch))
    for item, outcome in zip(batch, outcomes, strict=True):
        record(item, outcome, now=now, stats=stats)


def record(item: Claimed, outcome: Outcome, *, now: dt.datetime, stats: DrainStats) -> None:
    """Write an attempt's result; the delivery moves on only if this worker still holds its claim."""
    with transaction.atomic():
        DeliveryAttempt.objects.filter(pk=item.attempt_id).update(
            status=outcome.status,
            status_code=outcome.status_code,
            latency_ms=outcome.latency_ms,
            error_code=outcome.error_code,
            error=outcome.error,
            response_excerpt=outcome.excerpt,
            address=outcome.address,
            finished_at=now,
        )
        mine = Delivery.all_tenants.select_for_update().filter(pk=item.delivery_id, claim=item.claim).first()
        if mine is None or mine.status != DeliveryStatus.PENDING:
            return  # the lease ran out and another worker took it over: its result decides
        last = {
            "last_status_code": outcome.status_code,
            "last_error_code": outcome.error_code,
            "last_error": outcome.error,
            "locked_until": None,
            "claim": "",
        }
        if outcome.status == AttemptStatus.SUCCEEDED:
            Delivery.all_tenants.filter(pk=mine.pk).update(status=DeliveryStatus.SUCCEEDED, finished_at=now, **last)
            endpoint_failures_record(endpoint_id=mine.endpoint_id, failed=False)
            stats.succeeded += 1
            return
        horizon = (mine.first_attempt_at or now) + dt.timedelta(seconds=settings.GRYVIA_WEBHOOK_RETRY_HORIZON_S)
        if now >= horizon:
            Delivery.all_tenants.filter(pk=mine.pk).update(status=DeliveryStatus.FAILED, finished_at=now, **last)
            stats.failed += 1
            if endpoint_failures_record(endpoint_id=mine.endpoint_id, failed=True):
                stats.disabled.append(mine.endpoint_id)
            return
        due = min(now + dt.timedelta(seconds=backoff(mine.attempts)), horizon)
        Delivery.all_tenants.filter(pk=mine.pk).update(next_attempt_at=due, **last)
        stats.retrying += 1
