"""`gryvia jobs ...`: submit, estimate, list, get, logs, events, cancel, release, resize, delete."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..client import job_path
from ..context import Context
from ..errors import ApiError, CliError, UsageError
from ..manifests import read_sources
from ..output import clean, emit, emit_many, events_table, job_summary, jobs_table, table
from ..wait import DEFAULT_INTERVAL_S, Progress, finished, outcome, phase_of, started, stopped, wait_for
from .common import add_output, non_negative_int, positive_int, seconds

PHASES = ("Pending", "Queued", "Scheduling", "Running", "Succeeded", "Failed", "Cancelled", "Rejected", "Preempted")
TYPES = ("training", "fine-tuning", "evaluation", "inference")
ALL_PAGE_SIZE = 500


def _phase(text: str) -> str:
    for phase in PHASES:
        if phase.lower() == text.lower():
            return phase
    raise argparse.ArgumentTypeError(f"{text!r} is not a phase: {', '.join(PHASES)}")


def _add_wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval", type=seconds, default=DEFAULT_INTERVAL_S, metavar="S", help="seconds between status polls"
    )
    parser.add_argument("--timeout", type=seconds, default=0, metavar="S", help="give up waiting after S seconds")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    jobs = sub.add_parser("jobs", parents=[common], help="GryviaAIJobs: submit, watch, manage")
    actions = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("submit", parents=[common], help="submit jobs from YAML or JSON manifests")
    p.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="a manifest file, YAML (several documents allowed) or JSON; '-' reads stdin; repeatable",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait until done: exit 0 when Succeeded (an inference job: Running), 1 when it failed",
    )
    p.add_argument("-F", "--follow", action="store_true", help="stream the job's logs until it ends, then as --wait")
    _add_wait_options(p)
    add_output(p)
    p.set_defaults(func=cmd_submit)

    p = actions.add_parser("estimate", parents=[common], help="price jobs from manifests before submitting them")
    p.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="a manifest file, as for submit; '-' reads stdin; repeatable",
    )
    add_output(p)
    p.set_defaults(func=cmd_estimate)

    p = actions.add_parser("list", parents=[common], help="list jobs")
    p.add_argument("--phase", type=_phase, help=f"only this phase ({', '.join(PHASES)})")
    p.add_argument("--type", choices=TYPES, help="only this job type")
    p.add_argument("--all", action="store_true", help="every page, not just the first")
    p.add_argument("--limit", type=positive_int, help="jobs per page")
    add_output(p)
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("get", parents=[common], help="show one job")
    p.add_argument("name")
    add_output(p)
    p.set_defaults(func=cmd_get)

    p = actions.add_parser("logs", parents=[common], help="print a job's logs")
    p.add_argument("name")
    p.add_argument("-f", "--follow", action="store_true", help="keep streaming until the job's pods finish")
    p.add_argument("--index", type=non_negative_int, help="only this node (completion index)")
    p.add_argument("--tail", type=non_negative_int, metavar="N", help="only the last N lines of each node")
    p.set_defaults(func=cmd_logs)

    p = actions.add_parser("events", parents=[common], help="list a job's events")
    p.add_argument("name")
    add_output(p)
    p.set_defaults(func=cmd_events)

    p = actions.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("name")
    p.add_argument("--wait", action="store_true", help="wait until the job has stopped")
    _add_wait_options(p)
    add_output(p)
    p.set_defaults(func=cmd_cancel)

    p = actions.add_parser("release", parents=[common], help="let a job held by a hard budget run (platform admins)")
    p.add_argument("name")
    add_output(p)
    p.set_defaults(func=cmd_release)

    p = actions.add_parser("resize", parents=[common], help="change an elastic job's node count")
    p.add_argument("name")
    p.add_argument("--nodes", type=positive_int, required=True, metavar="N", help="the desired number of nodes")
    add_output(p)
    p.set_defaults(func=cmd_resize)

    p = actions.add_parser("delete", parents=[common], help="delete a job and its resources")
    p.add_argument("name")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_delete)


def _name(job: dict[str, Any]) -> str:
    return str((job.get("metadata") or {}).get("name") or "?")


def cmd_submit(ctx: Context, args: argparse.Namespace) -> int:
    manifests = read_sources(args.files, ctx.stdin)
    if args.follow and len(manifests) != 1:
        raise UsageError(f"--follow needs exactly one job; {', '.join(args.files)} holds {len(manifests)}")
    client, begun = ctx.client(), time.monotonic()
    submitted: list[dict[str, Any]] = []
    failures = 0
    for manifest in manifests:
        try:
            answer = client.request("POST", "jobs/", content=manifest.body, content_type=manifest.content_type)
            job = client.decode(answer) or {}
        except ApiError as exc:
            if len(manifests) == 1 or exc.status == 401:
                raise
            ctx.stderr.write("".join(clean(line) + "\n" for line in f"error: {manifest.label}: {exc}".splitlines()))
            failures += 1
            continue
        submitted.append(job)
        if args.output == "table":
            tenant = (job.get("metadata") or {}).get("tenant")
            ctx.say(f"job/{_name(job)} submitted" + (f" (tenant {tenant})" if tenant else ""))
    if args.output != "table" and submitted:
        emit_many(submitted, args.output, ctx.stdout)
    code = 1 if failures else 0
    if args.follow and submitted:
        return _follow(ctx, args, submitted[0], begun)
    if args.wait:
        for job in submitted:
            progress = Progress(ctx.stderr, start=begun)
            last = wait_for(client, job, finished, progress, interval=args.interval, timeout=args.timeout)
            code = max(code, outcome(last, ctx.stderr))
    return code


_ESTIMATE_HEADERS = ("JOB", "GPUS", "GPU TYPE", "DURATION", "SKU", "COST", "CURRENCY", "CHEAPEST")


def _estimate_row(label: str, estimate: dict[str, Any]) -> list[Any]:
    duration = f"{estimate.get('duration_seconds')}s"
    if estimate.get("duration_source") == "default":
        duration += " (default)"
    cheapest = estimate.get("cheapest") or {}
    return [
        label,
        estimate.get("gpus"),
        estimate.get("gpu_type"),
        duration,
        estimate.get("sku") or "-",
        estimate.get("cost"),
        estimate.get("currency"),
        f"{cheapest['gpu_type']} {cheapest['cost']}" if cheapest else "-",
    ]


def cmd_estimate(ctx: Context, args: argparse.Namespace) -> int:
    """Price each manifest (nothing is submitted); exit 1 when one of several could not be priced."""
    manifests = read_sources(args.files, ctx.stdin)
    client = ctx.client()
    priced: list[tuple[str, dict[str, Any]]] = []
    failures = 0
    for manifest in manifests:
        try:
            answer = client.request("POST", "jobs/estimate/", content=manifest.body, content_type=manifest.content_type)
        except ApiError as exc:
            if len(manifests) == 1 or exc.status == 401:
                raise
            ctx.stderr.write("".join(clean(line) + "\n" for line in f"error: {manifest.label}: {exc}".splitlines()))
            failures += 1
            continue
        priced.append((manifest.name or manifest.label, client.decode(answer) or {}))
    if args.output != "table":
        if priced:
            emit_many([estimate for _, estimate in priced], args.output, ctx.stdout)
    elif priced:
        ctx.stdout.write(table(_ESTIMATE_HEADERS, [_estimate_row(label, e) for label, e in priced], max_width=120))
        for label, estimate in priced:
            ctx.stdout.write(clean(f"{label}: {estimate.get('message', '')}") + "\n")
    return 1 if failures else 0


def _follow(ctx: Context, args: argparse.Namespace, job: dict[str, Any], begun: float) -> int:
    """After submit: wait for the job to start, stream its logs to the end, then report how it ended."""
    client = ctx.client()
    wait = {"interval": args.interval, "timeout": args.timeout}
    job = wait_for(client, job, started, Progress(ctx.stderr, start=begun), **wait)
    if phase_of(job) not in ("Cancelled", "Rejected"):
        try:
            _stream_logs(ctx, _name(job), {"follow": 1})
        except ApiError as exc:
            ctx.warn(f"warning: no logs for job {_name(job)}: {exc.message}")
        job = client.get(job_path(_name(job)))
    job = wait_for(client, job, finished, Progress(ctx.stderr, start=begun), **wait)
    return outcome(job, ctx.stderr)


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    params = {"phase": args.phase, "type": args.type, "limit": args.limit}
    if args.all:
        jobs = client.list_all("jobs/", **{**params, "limit": args.limit or ALL_PAGE_SIZE})
    else:
        page = client.get("jobs/", **params)
        jobs = page.get("results", []) if isinstance(page, dict) else page
        if isinstance(page, dict) and page.get("next"):
            ctx.warn(f"showing {len(jobs)} of {page.get('count', 'more')} jobs; use --all for every page")
    if args.output != "table":
        emit(jobs, args.output, ctx.stdout)
    elif jobs:
        ctx.stdout.write(jobs_table(jobs))
    else:
        ctx.warn("No jobs found.")
    return 0


def cmd_get(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client().get(job_path(args.name))
    if args.output == "table":
        ctx.stdout.write(job_summary(job))
    else:
        emit(job, args.output, ctx.stdout)
    return 0


def _stream_logs(ctx: Context, name: str, params: dict[str, Any]) -> None:
    for piece in ctx.client().stream_text(job_path(name, "logs"), params=params):
        ctx.stdout.write(piece)
        ctx.stdout.flush()


def cmd_logs(ctx: Context, args: argparse.Namespace) -> int:
    params = {"index": args.index, "tail": args.tail, "follow": 1 if args.follow else None}
    _stream_logs(ctx, args.name, params)
    return 0


def cmd_events(ctx: Context, args: argparse.Namespace) -> int:
    events = ctx.client().list_all(job_path(args.name, "events"))
    if args.output != "table":
        emit(events, args.output, ctx.stdout)
    elif events:
        ctx.stdout.write(events_table(events))
    else:
        ctx.warn(f"No events for job {args.name}.")
    return 0


def cmd_cancel(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    job = client.post(job_path(args.name, "cancel")) or client.get(job_path(args.name))
    if args.output == "table":
        ctx.say(f"job/{_name(job)} cancel requested (phase {phase_of(job)})")
    if args.wait:
        job = wait_for(client, job, stopped, Progress(ctx.stderr), interval=args.interval, timeout=args.timeout)
        if args.output == "table":
            ctx.say(f"job/{_name(job)} {phase_of(job)}")
    if args.output != "table":
        emit(job, args.output, ctx.stdout)
    return 0


def cmd_release(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client().post(job_path(args.name, "release"))
    if args.output == "table":
        ctx.say(f"job/{_name(job)} released from its budget hold (phase {phase_of(job)})")
    else:
        emit(job, args.output, ctx.stdout)
    return 0


def cmd_resize(ctx: Context, args: argparse.Namespace) -> int:
    job = ctx.client().post(job_path(args.name, "resize"), {"nodes": args.nodes})
    if args.output == "table":
        ctx.say(f"job/{_name(job)} resized to {args.nodes} node{'s' if args.nodes != 1 else ''}")
    else:
        emit(job, args.output, ctx.stdout)
    return 0


def _confirm(ctx: Context, question: str) -> bool:
    ctx.stderr.write(f"{question} [y/N] ")
    ctx.stderr.flush()
    answer = ctx.stdin.readline()
    if not answer.endswith("\n"):
        ctx.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    if not args.yes:
        if not ctx.stdin.isatty():
            raise UsageError(f"not deleting job {args.name}: stdin is not a terminal to confirm on; pass --yes")
        if not _confirm(ctx, f"Delete job {args.name} and everything it runs?"):
            raise CliError(f"aborted: job {args.name} was not deleted")
    ctx.client().delete(job_path(args.name))
    ctx.say(f"job/{args.name} deleted")
    return 0
