"""`make bench-admission`: Kueue's scheduler performance test, replayed through Gryvia's admission path.

Shape (Kueue's test/performance/scheduler default generator config): 5 cohorts of 6 queues, each queue with a
nominal quota of 20 `nvidia.com/gpu` (borrowing limit 100), spread over 10 tenants of 3 queues each; a simulated
cluster with the total nominal quota (600 GPUs) on one Ready Node. Per queue, 70 % small jobs (1 GPU for 200 ms,
priority 25), 20 % medium (5 GPUs, 500 ms, priority 50) and 10 % large (20 GPUs, 1 s, priority 100): Kueue's
350/100/50 workloads per queue with its 50/100/200 priorities scaled into Gryvia's 0..100 range.

Every job is submitted up front (rows equivalent to `apps.jobs.services.job_create`'s, bulk-inserted; or through
`job_create` itself with `--submit service`). Then cycles run until every job has finished: each cycle is one
`JobReconciler(...).run_pass()` (admission in `begin_pass`, workloads created in `desired`, Queued/Running/
Succeeded written by `observe`), unchanged production code, against benchmarks.simulated.SimulatedCluster. The
simulated clock stands still after a cycle that freed quota its own admission could not use yet (preemption
victims requeued or still stopping: the next pass admits at the same instant, as the reconciler's nudge makes it)
and otherwise jumps to the next workload completion. A pass that sees jobs finish admits into their quota itself.
The control plane's clock (`django.utils.timezone.now`) is the simulated one, so the cluster's timestamps and
Gryvia's own agree: finished jobs are collected (TTL 0) by the pass that sees them finish, as on a real cluster.

Each size runs in a child process with a fresh database: PostgreSQL database `gryvia_bench` (created, migrated with
`call_command("migrate")` and dropped here), or SQLite in a temporary data dir with `--db sqlite`. REDIS_URL is unset
(in-process channel layer) and DEBUG is off (no query log), as in a production worker without Redis; once the jobs
are seeded, the child freezes its start-up heap (apps.core.db.heap), as the Celery worker and `serve` do once started.

    python -m benchmarks.admission                       # 150, 1,500 and 15,000 jobs on PostgreSQL
    python -m benchmarks.admission --sizes 150,1500 --db sqlite
    python -m benchmarks.admission --sizes 1500 --profile /tmp/bench.prof   # cProfile of the cycles + SQL by table

`--time-limit-s` (default 570) bounds the whole run: a size that would not finish within it stops before a cycle that
would likely end past it, and its line says so (`partial=…`), with the figures of the cycles it ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from .measure import Calibration, Queries, idle_passes, interpreter_line, log, percentile, report_profile

DEFAULT_SIZES = (150, 1500, 15000)
DB_NAME = os.environ.get("GRYVIA_BENCH_DB", "gryvia_bench")  # another name lets two runs share a server
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432"
QUEUES_PER_TENANT = 3
TENANTS = 10
COHORTS = 5
NOMINAL = 20
BORROWING_LIMIT = 100
CAPACITY = TENANTS * QUEUES_PER_TENANT * NOMINAL  # the total nominal quota: 600 GPUs
# class: (share of the jobs, GPUs, runtime in simulated seconds, priority)
CLASSES = {"small": (0.7, 1, 0.2, 25), "medium": (0.2, 5, 0.5, 50), "large": (0.1, 20, 1.0, 100)}
RUNTIME_BY_GPUS = {gpus: runtime for _share, gpus, runtime, _priority in CLASSES.values()}
KUEUE_351 = "Kueue's published run of this test on a real cluster takes about 351 s for 15,000 workloads"
HEADER = (
    "# Gryvia admission benchmark, Kueue scheduler-perf shape (30 queues x 20 nvidia.com/gpu in 5 cohorts, "
    "10 tenants, 600-GPU simulated cluster; jobs 70/20/10 % small 1 GPU 200 ms / medium 5 GPUs 500 ms / large "
    "20 GPUs 1 s, all submitted up front). One cycle = one JobReconciler.run_pass() on a simulated clock. "
    "admissions/s: jobs admitted per second of cycle wall time; cpu_ms_per_admission: this process's CPU time "
    "(time.process_time(), database server excluded) over all cycles / jobs admitted; cycle_p50/p99_ms: wall time "
    "of one cycle; queries_per_cycle: mean executes (round trips) per cycle; sim_makespan_s: simulated time until "
    f"the last job finished. Context only, not a ratio: {KUEUE_351}; no API server, kubelet or scheduler runs here."
)


# --- the parent: one child process per size ----------------------------------------------------------------------


def _pg_admin(pg_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{pg_url.rstrip('/')}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.admission", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated job counts")
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--pg-url", default=os.environ.get("GRYVIA_BENCH_PG_URL", DEFAULT_PG), help="server URL")
    parser.add_argument("--submit", choices=("bulk", "service"), default="bulk", help="bulk rows or job_create")
    parser.add_argument("--time-limit-s", type=float, default=570.0, help="for the whole run, all sizes")
    parser.add_argument("--profile", default="", help="write cProfile stats of the cycles here (SIZE appended)")
    parser.add_argument("--trace", default="", help="write one line per cycle here (SIZE appended): cpu, admitted")
    parser.add_argument(
        "--idle-passes",
        default="",
        metavar="CYCLE:PASSES",
        help="after cycle CYCLE, run PASSES extra passes with the clock standing still (nothing to do) and print "
        "their median CPU: a cycle's fixed cost at that size (not counted in the figures)",
    )
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--budget-s", type=float, default=0.0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.child:
        return _child(args)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or any(s < 10 for s in sizes):
        raise SystemExit("--sizes: job counts of at least 10, comma-separated")
    deadline = time.monotonic() + args.time_limit_s
    print(HEADER, flush=True)
    calibration = Calibration()
    print(interpreter_line(calibration), flush=True)
    failed = 0
    for size in sizes:
        budget = deadline - time.monotonic()
        if budget < 5:
            print(f"jobs={size} db={args.db} skipped: the --time-limit-s {args.time_limit_s:g} is spent", flush=True)
            continue
        if args.db == "postgresql":
            _pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
            _pg_admin(args.pg_url, f'CREATE DATABASE "{DB_NAME}"')
        command = [sys.executable, "-m", "benchmarks.admission", "--child", str(size), "--budget-s", f"{budget:.1f}"]
        command += ["--db", args.db, "--pg-url", args.pg_url, "--submit", args.submit]
        if args.profile:
            command += ["--profile", args.profile]
        if args.trace:
            command += ["--trace", args.trace]
        if args.idle_passes:
            command += ["--idle-passes", args.idle_passes]
        try:
            # The child prints its result line to stdout (inherited) and its progress to stderr.
            failed += subprocess.run(command, check=False).returncode != 0
            # The machine's speed again, right after this size's cycles (a shared VM's moves within minutes).
            print(f"# jobs={size}: the machine after it: {calibration.measure()}", flush=True)
        finally:
            if args.db == "postgresql":
                _pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
    return 1 if failed else 0


# --- the child: one size, one fresh database ---------------------------------------------------------------------


def _configure(args: argparse.Namespace) -> str:
    data_dir = tempfile.mkdtemp(prefix="gryvia-bench-")
    os.environ["GRYVIA_DATA_DIR"] = data_dir
    os.environ["DJANGO_SETTINGS_MODULE"] = "gryvia_site.settings.base"
    os.environ["GRYVIA_ENV"] = "development"
    os.environ["GRYVIA_DEBUG"] = "0"  # no query log, as in production
    os.environ.pop("REDIS_URL", None)  # the in-process channel layer; nudges and broadcasts stay in this process
    if args.db == "postgresql":
        os.environ["DATABASE_URL"] = f"{args.pg_url.rstrip('/')}/{DB_NAME}"
    else:
        os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()
    return data_dir


def _class_plan(size: int) -> list[tuple[str, int]]:
    """(class, queue index) for each job in submission order: exact 70/20/10 counts, shuffled, queues round-robin."""
    import random

    counts = {name: round(size * share) for name, (share, *_rest) in CLASSES.items()}
    counts["small"] += size - sum(counts.values())
    classes = [name for name, count in counts.items() for _ in range(count)]
    random.Random(15000).shuffle(classes)
    queues = TENANTS * QUEUES_PER_TENANT
    return [(name, index % queues) for index, name in enumerate(classes)]


def _seed(size: int, submit: str) -> int:
    """Tenants, cohorts, queues (through their services) and the jobs; returns the number of jobs."""
    from django.db import transaction

    from apps.core.audit import snapshot
    from apps.core.models import AuditEntry
    from apps.core.principal import system
    from apps.jobs.admission.inputs import Priorities, admission_fields
    from apps.jobs.models import Job, JobEvent
    from apps.jobs.services import job_create
    from apps.jobs.spec import normalize_spec
    from apps.queueing.services import cohort_create, queue_create
    from apps.tenants.services import tenant_create

    actor = system("benchmark")
    tenants = [tenant_create(actor=actor, slug=f"bench-{i:02d}") for i in range(TENANTS)]
    cohorts = [cohort_create(actor=actor, name=f"cohort-{c}") for c in range(COHORTS)]
    queues = []  # (tenant, queue name); queue g is tenant g // 3's, in cohort g % 5: cohorts span six tenants
    for g in range(TENANTS * QUEUES_PER_TENANT):
        tenant, name = tenants[g // QUEUES_PER_TENANT], f"q{g % QUEUES_PER_TENANT}"
        quota = {"resource": "nvidia.com/gpu", "nominal": NOMINAL, "borrowingLimit": BORROWING_LIMIT}
        queue_create(actor=actor, tenant=tenant, name=name, cohort=cohorts[g % COHORTS], quotas=[quota])
        queues.append((tenant, name))

    def spec(cls: str, queue: str) -> dict[str, Any]:
        _share, gpus, _runtime, priority = CLASSES[cls]
        # Collected as soon as they finish (ttlSecondsAfterFinished 0), as Kueue's test deletes finished workloads:
        # a finished job's objects would otherwise stay listed for the default week.
        return {
            "type": "training",
            "image": "busybox:1.36",
            "gpus": gpus,
            "priority": priority,
            "queueName": queue,
            "ttlSecondsAfterFinished": 0,
        }

    plan = _class_plan(size)
    if submit == "service":
        for index, (cls, g) in enumerate(plan):
            tenant, queue = queues[g]
            job_create(actor=actor, tenant=tenant, name=f"{cls}-{index:05d}", spec=spec(cls, queue))
        return len(plan)
    # Bulk rows equal to job_create's: the normalized spec, the Job row, its `job.create` audit row and its
    # `Submitted` event (job_create's broadcast and reconcile nudge have no listener here).
    normalized = {(cls, g): normalize_spec(spec(cls, queues[g][1])) for cls in CLASSES for g in range(len(queues))}
    priorities = Priorities()
    columns = {key: admission_fields(value, priorities) for key, value in normalized.items()}
    with transaction.atomic():
        jobs = [
            Job(
                tenant=queues[g][0],
                name=f"{cls}-{index:05d}",
                spec=normalized[(cls, g)],
                submitted_by=actor.label,
                current_nodes=0,
                **columns[(cls, g)],
            )
            for index, (cls, g) in enumerate(plan)
        ]
        jobs = Job.all_tenants.bulk_create(jobs, batch_size=1000)
        AuditEntry.all_tenants.bulk_create(
            [
                AuditEntry(
                    tenant_id=job.tenant_id,
                    tenant_slug=job.tenant.slug,
                    actor=actor.label[:200],
                    actor_user_id=actor.user_id,
                    action="job.create",
                    object_type="job",
                    object_id=job.name,
                    object_repr=str(job)[:300],
                    before=None,
                    after=snapshot(job, Job.AUDIT_FIELDS),
                )
                for job in jobs
            ],
            batch_size=1000,
        )
        JobEvent.objects.bulk_create(
            [JobEvent(job=job, reason="Submitted", message=f"submitted by {actor.label}") for job in jobs],
            batch_size=1000,
        )
    return len(jobs)


def _child(args: argparse.Namespace) -> int:
    started = time.monotonic()
    data_dir = _configure(args)
    import cProfile
    import shutil

    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Count
    from django.utils import timezone

    from apps.core.db.heap import freeze_startup_heap
    from apps.jobs.choices import TERMINAL_PHASES, JobPhase
    from apps.jobs.models import Job
    from apps.jobs.reconciler import JobReconciler

    from .simulated import SimulatedCluster

    size = args.child
    try:
        call_command("migrate", verbosity=0, interactive=False)
        t0 = time.monotonic()
        total = _seed(size, args.submit)
        # As after any bulk load (pgbench does the same): the planner's statistics describe the seeded tables, not
        # the empty ones the migrations made. Autovacuum would do it within its naptime; the cycles start at once.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        log(f"[{size}] seeded {total} jobs in {time.monotonic() - t0:.1f} s ({args.submit}); running cycles")

        def runtime_of(workload: dict[str, Any]) -> float:
            container = workload["spec"]["template"]["spec"]["containers"][0]
            return RUNTIME_BY_GPUS[int(container["resources"]["limits"]["nvidia.com/gpu"])]

        cluster = SimulatedCluster(gpus=CAPACITY, runtime_of=runtime_of)
        # One clock for both sides: the control plane's `timezone.now()` is the simulated one, so the times the
        # cluster stamps (startTime, completionTime) and those Gryvia compares them with (TTL collection, usage
        # records) agree, as they do on a real cluster. On wall time the simulated clock runs ahead of it early on,
        # and finished jobs would wait, uncollected, for wall time to catch up with their completion times.
        timezone.now = cluster.clock
        reconciler = JobReconciler(cluster, max_per_pass=10**9, budget_s=1e9)
        # As the Celery worker and `serve` do once started (the jobs were submitted before this "worker" started).
        freeze_startup_heap()
        queries = Queries(by_table=bool(args.profile))
        # CPU time, like the figure it explains (waits on the database server are not counted).
        profiler = cProfile.Profile(time.process_time) if args.profile else None
        walls: list[float] = []
        per_cycle_queries: list[int] = []
        cpu = 0.0
        finished, makespan, stalled, failed, last_report = 0, None, 0, False, time.monotonic()
        deadline = started + args.budget_s
        fingerprint: tuple = ()
        trace: list[tuple[float, float, int, int]] | None = [] if args.trace else None  # wall, cpu, started, ended
        idle = tuple(int(part) for part in args.idle_passes.split(":")) if args.idle_passes else None
        while True:
            before_q, before_started = queries.count, cluster.jobs_started
            cpu0, wall0, cpu_before = time.process_time(), time.perf_counter(), cpu
            with connection.execute_wrapper(queries):
                if profiler is not None:
                    profiler.enable()
                reconciler.run_pass()
                if profiler is not None:
                    profiler.disable()
            walls.append(time.perf_counter() - wall0)
            cpu += time.process_time() - cpu0
            per_cycle_queries.append(queries.count - before_q)
            # Bookkeeping between cycles (not measured): the jobs by phase, as the database now has them.
            phases = dict(Job.all_tenants.values_list("phase").annotate(n=Count("id")).order_by())
            now_finished = sum(n for phase, n in phases.items() if phase in TERMINAL_PHASES)
            if trace is not None:
                trace.append(
                    (walls[-1], cpu - cpu_before, cluster.jobs_started - before_started, now_finished - finished)
                )
            finished = now_finished
            if idle is not None and len(walls) == idle[0]:
                idle_passes(size, reconciler, queries, idle[1])
            if finished >= total:
                makespan = cluster.now
                break
            if time.monotonic() - last_report > 15:
                last_report = time.monotonic()
                log(
                    f"[{size}] cycle {len(walls)}: sim {cluster.now:.1f} s, {cluster.jobs_started} admitted, "
                    f"{finished} finished, last cycle {walls[-1] * 1000:.0f} ms / {per_cycle_queries[-1]} queries"
                )
            if time.monotonic() + max(walls[-2:]) > deadline:  # the next cycle would likely end past the budget
                break
            previous, fingerprint = fingerprint, (sorted(phases.items()), cluster.jobs_started, cluster.jobs_deleted)
            changed = fingerprint != previous
            # Quota freed after the pass's admission ran (victims requeued, or still being evicted): the next pass
            # runs at the same instant, as the reconciler's own nudge makes it. A finished job's quota is free for
            # the admission of the pass that sees it finish. Otherwise the clock jumps to the next completion.
            freed = reconciler.freed_after_admission > 0 or phases.get(JobPhase.PREEMPTED, 0) > 0
            upcoming = None if (freed and changed) else cluster.next_finish()
            if upcoming is not None:
                cluster.advance_to(upcoming)
            stalled = 0 if (changed or upcoming is not None) else stalled + 1
            if stalled > 2:
                log(f"[{size}] no progress for 3 cycles with {total - finished} job(s) unfinished: stopping")
                failed = True
                break
        admitted = cluster.jobs_started
        # Finished jobs ask to be collected at once (ttlSecondsAfterFinished 0): the pass that sees one finish
        # deletes its objects and finalizes it, so none may be left when the last one has finished.
        uncollected = Job.all_tenants.filter(phase__in=TERMINAL_PHASES, finalized=False).count()
        line = (
            f"jobs={size} db={connection.vendor} admissions/s={admitted / sum(walls):.1f} "
            f"cpu_ms_per_admission={cpu * 1000 / max(admitted, 1):.2f} "
            f"cycle_p50_ms={percentile(walls, 50) * 1000:.1f} cycle_p99_ms={percentile(walls, 99) * 1000:.1f} "
            f"queries_per_cycle={statistics.fmean(per_cycle_queries):.0f} "
        )
        if makespan is not None:
            line += f"sim_makespan_s={makespan:.1f}"
        else:
            line += (
                f"sim_makespan_s=n/a partial=stopped_after_{len(walls)}_cycles_at_sim_{cluster.now:.1f}s:"
                f"{admitted}_admitted,{finished}/{total}_finished"
            )
        print(line, flush=True)
        log(f"[{size}] finished jobs left uncollected: {uncollected}")
        log(f"[{size}] CPU inside SQL execute (psycopg, client side): {queries.cpu:.2f} s of {cpu:.2f} s")
        log(
            f"[{size}] time inside the simulated cluster's calls (a stand-in for the API server's work, counted in "
            f"the figure above): {cluster.busy_s:.2f} s of {cpu:.2f} s, "
            f"{cluster.busy_s * 1000 / max(admitted, 1):.2f} ms per admission"
        )
        log(
            f"[{size}] {len(walls)} cycles, {sum(walls):.1f} s in cycles, queries per cycle "
            f"min {min(per_cycle_queries)} median {statistics.median(per_cycle_queries):.0f} "
            f"max {max(per_cycle_queries)}; {cluster.jobs_started} workloads started, {cluster.jobs_deleted} deleted "
            f"(evictions); cluster calls {dict(cluster.calls)}"
        )
        if trace is not None:
            with open(f"{args.trace}.{size}", "w") as out:
                out.write("wall_ms cpu_ms admitted finished\n")
                out.writelines(f"{w * 1000:.2f} {c * 1000:.2f} {a} {f}\n" for w, c, a, f in trace)
        if profiler is not None:
            report_profile(profiler, f"{args.profile}.{size}", size, queries, len(walls))
        return 3 if failed else 0  # a run stopped by its time budget is reported (partial=...), not a failure
    finally:
        connection.close()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
