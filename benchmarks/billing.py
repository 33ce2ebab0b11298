"""`make bench-billing`: usage ingestion and ledger verification on PostgreSQL.

`usage_ingest`: N external usage events (2 GPUs × 90 min of H100 each, distinct ids, one tenant) go through the
real ingest function, `apps.billing.services.usage_events_ingest`, in batches of B: each batch is validated,
priced, inserted with `INSERT … ON CONFLICT DO NOTHING`, sealed into the tenant's ledger and committed before the
next starts. Afterwards the records are counted back from the database: `durable=1` when every event is there,
once, with its ledger entry. events/s = N / wall time of all batches. Then the whole batch list is sent again
(idempotency: nothing may change) and `ledger_verify` walks the chain: entries/s = entries / wall time.

A database `gryvia_bench_billing` is created on the server (default postgres://postgres@127.0.0.1:5432, or
GRYVIA_BENCH_PG_URL), migrated, and dropped at the end. Context: Lago publishes about 10,000 events/s for its
PostgreSQL-only ingestion.

    python -m benchmarks.billing                         # 100,000 events in batches of 5,000
    python -m benchmarks.billing --events 2000 --batch 500
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time

DB_NAME = os.environ.get("GRYVIA_BENCH_BILLING_DB", "gryvia_bench_billing")  # another name: two runs share a server
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _pg_admin(pg_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{pg_url.rstrip('/')}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def _configure(pg_url: str) -> None:
    os.environ["GRYVIA_DATA_DIR"] = tempfile.mkdtemp(prefix="gryvia-bench-billing-")
    os.environ["DJANGO_SETTINGS_MODULE"] = "gryvia_site.settings.base"
    os.environ["GRYVIA_ENV"] = "development"
    os.environ["GRYVIA_DEBUG"] = "0"
    os.environ.pop("REDIS_URL", None)
    os.environ["DATABASE_URL"] = f"{pg_url.rstrip('/')}/{DB_NAME}"
    import django

    django.setup()


def _run(events: int, batch: int) -> int:
    from decimal import Decimal

    from django.core.management import call_command
    from django.db import connection

    from apps.billing import services
    from apps.billing.models import LedgerEntry, UsageRecord
    from apps.core.principal import system
    from apps.tenants import services as tenants

    call_command("migrate", verbosity=0)
    actor = system("bench")
    tenant = tenants.tenant_create(actor=actor, slug="bench")
    start = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
    services.sku_create(actor=actor, name="h100", gpu_type="H100", hourly_rate=Decimal("2.5"), effective_from=start)
    stamp = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    end = (start + dt.timedelta(minutes=90)).strftime("%Y-%m-%dT%H:%M:%SZ")
    batches = [
        [
            {"id": f"evt-{n:09d}", "gpu_type": "H100", "gpus": 2, "start": stamp, "end": end, "job": f"job-{n % 97}"}
            for n in range(first, min(first + batch, events))
        ]
        for first in range(0, events, batch)
    ]
    log(f"ingesting {events} events in {len(batches)} batches of {batch}")
    new, ingest_s, ingest_cpu_s = 0, 0.0, 0.0
    for index, events_of_batch in enumerate(batches):
        began, began_cpu = time.perf_counter(), time.process_time()
        new += services.usage_events_ingest(tenant=tenant, events=events_of_batch).new
        took = time.perf_counter() - began
        ingest_s += took
        ingest_cpu_s += time.process_time() - began_cpu
        if index % 5 == 0:
            log(f"batch {index + 1}/{len(batches)}: {len(events_of_batch) / took:.0f} events/s")
    connection.close()  # counted back on a fresh connection: what was committed, nothing cached
    stored = UsageRecord.all_tenants.filter(tenant=tenant, final=True).count()
    sealed = LedgerEntry.all_tenants.filter(tenant=tenant).count()
    again = sum(services.usage_events_ingest(tenant=tenant, events=b).new for b in batches)
    durable = int(new == stored == sealed == events and again == 0)
    cost = sum(r.cost for r in UsageRecord.all_tenants.filter(tenant=tenant).only("cost")[:1])
    began = time.perf_counter()
    result = services.ledger_verify(tenant=tenant)
    verify_s = time.perf_counter() - began
    print(
        f"ledger_verify entries/s={result.entries / verify_s:.0f} entries={result.entries} valid={int(result.valid)}",
        flush=True,
    )
    print(
        f"usage_ingest events/s={events / ingest_s:.0f} cpu_us_per_event={ingest_cpu_s / events * 1e6:.1f} "
        f"durable={durable} events={events} batch={batch} "
        f"stored={stored} sealed={sealed} resent_new={again} cost_per_event={cost}",
        flush=True,
    )
    return 0 if durable and result.valid else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.billing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--pg-url", default=os.environ.get("GRYVIA_BENCH_PG_URL", DEFAULT_PG), help="server URL")
    args = parser.parse_args(argv)
    if args.events < 1 or not 1 <= args.batch <= 10_000:
        raise SystemExit("--events must be at least 1 and --batch from 1 to 10000")
    print(
        "# Gryvia billing benchmark (PostgreSQL): usage_ingest = external events through usage_events_ingest, "
        "committed per batch and counted back; ledger_verify = the tenant's chain recomputed. "
        "Context: Lago publishes about 10,000 events/s for PostgreSQL-only ingestion.",
        flush=True,
    )
    _pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
    _pg_admin(args.pg_url, f'CREATE DATABASE "{DB_NAME}"')
    try:
        _configure(args.pg_url)
        return _run(args.events, args.batch)
    finally:
        try:
            from django.db import connections

            connections.close_all()
        finally:
            _pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main())
