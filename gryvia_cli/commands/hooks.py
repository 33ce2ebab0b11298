"""`gryvia hooks …`: webhook endpoints (signed event delivery), their deliveries, redelivery, ping, rotation.

The signing secret is printed once, by `create` and `rotate-secret`; store it where the receiver reads it.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..context import Context
from ..errors import UsageError
from ..output import emit, table
from .common import add_output, non_negative_int

EVENTS = (
    "job.queued, job.running, job.succeeded, job.failed, job.cancelled, job.preempted, job.rejected, "
    "budget.threshold_crossed, invoice.finalized, invoice.paid, invoice.payment_failed, webhook.disabled"
)


def _path(hook: str | None = None, action: str = "") -> str:
    if hook is None:
        return "webhooks/"
    if not hook.isdigit():
        raise UsageError(f"a webhook is named by its numeric id (see `gryvia hooks list`), not {hook!r}")
    return f"webhooks/{hook}/{action}"


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    hooks = sub.add_parser("hooks", parents=[common], help="webhooks: signed event delivery to your endpoints")
    actions = hooks.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", parents=[common], help="list the tenant's webhook endpoints")
    add_output(p)
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("get", parents=[common], help="show one webhook endpoint")
    p.add_argument("id")
    add_output(p)
    p.set_defaults(func=cmd_get)

    p = actions.add_parser("create", parents=[common], help="register an endpoint (prints its secret once)")
    # Not `url`: that is the global --url (the Gryvia server).
    p.add_argument("endpoint_url", metavar="URL", help="https://… (or a Slack incoming webhook URL, --format slack)")
    p.add_argument("--event", dest="events", action="append", required=True, metavar="TYPE", help=f"{EVENTS}")
    p.add_argument("--format", choices=("standard", "slack"), default="standard")
    p.add_argument("--description", default="")
    p.add_argument("--job-name", dest="job_names", action="append", metavar="PATTERN", help="only jobs matching")
    p.add_argument("--job-label", dest="job_labels", action="append", type=_label, metavar="KEY=VALUE")
    p.add_argument("--disabled", action="store_true", help="create it disabled")
    add_output(p)
    p.set_defaults(func=cmd_create)

    p = actions.add_parser("delete", parents=[common], help="delete an endpoint and its delivery log")
    p.add_argument("id")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_delete)

    p = actions.add_parser("deliveries", parents=[common], help="an endpoint's deliveries, newest first")
    p.add_argument("id")
    p.add_argument("--status", choices=("pending", "succeeded", "failed"))
    add_output(p)
    p.set_defaults(func=cmd_deliveries)

    p = actions.add_parser("redeliver", parents=[common], help="send a delivery again (same webhook-id)")
    p.add_argument("id")
    p.add_argument("delivery")
    add_output(p)
    p.set_defaults(func=cmd_redeliver)

    p = actions.add_parser("ping", parents=[common], help="send a test event now and show the result")
    p.add_argument("id")
    add_output(p)
    p.set_defaults(func=cmd_ping)

    p = actions.add_parser("rotate-secret", parents=[common], help="a new secret (printed once)")
    p.add_argument("id")
    p.add_argument("--grace", type=non_negative_int, metavar="SECONDS", help="the old one also signs this long")
    add_output(p)
    p.set_defaults(func=cmd_rotate)


_HEADERS = ("ID", "URL", "FORMAT", "EVENTS", "ENABLED", "FAILURES")


def _rows(hooks: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [h["id"], h["url"], h["format"], ",".join(h["events"]), h["enabled"], h["consecutive_failures"]] for h in hooks
    ]


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    hooks = ctx.client().list_all(_path())
    if args.output != "table":
        emit(hooks, args.output, ctx.stdout)
    elif hooks:
        ctx.stdout.write(table(_HEADERS, _rows(hooks), max_width=140))
    else:
        ctx.warn("No webhooks: add one with `gryvia hooks create https://example.com/hook --event job.failed`.")
    return 0


def cmd_get(ctx: Context, args: argparse.Namespace) -> int:
    hook = ctx.client().get(_path(args.id))
    if args.output != "table":
        emit(hook, args.output, ctx.stdout)
        return 0
    ctx.stdout.write(table(_HEADERS, _rows([hook]), max_width=140))
    if hook.get("disabled_reason"):
        ctx.say(f"disabled: {hook['disabled_reason']}")
    return 0


def _show_secret(ctx: Context, hook: dict[str, Any], verb: str) -> None:
    ctx.say(f"webhook/{hook['id']} {verb}")
    ctx.stdout.write(f"secret: {hook['secret']}\n")
    ctx.warn("The secret is shown only now: store it where your receiver verifies signatures.")


def cmd_create(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"url": args.endpoint_url, "events": args.events, "format": args.format}
    if args.description:
        body["description"] = args.description
    if args.job_names:
        body["job_names"] = args.job_names
    if args.job_labels:
        body["job_labels"] = dict(args.job_labels)
    if args.disabled:
        body["enabled"] = False
    hook = ctx.client().post(_path(), body)
    if args.output == "table":
        _show_secret(ctx, hook, "created")
    else:
        emit(hook, args.output, ctx.stdout)
    return 0


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    if not args.yes and not ctx.stdin.isatty():
        raise UsageError(f"not deleting webhook {args.id}: stdin is not a terminal to confirm on; pass --yes")
    ctx.client().delete(_path(args.id))
    ctx.say(f"webhook/{args.id} deleted")
    return 0


def _delivery_rows(deliveries: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for d in deliveries:
        last = (d.get("attempt_log") or [{}])[-1]
        result = last.get("status_code") or last.get("error_code") or "-"
        due = (d.get("next_attempt_at") or "-") if d["status"] == "pending" else "-"
        rows.append([d["id"], d["type"], d["status"], d["attempts"], result, due])
    return rows


_DELIVERY_HEADERS = ("ID", "EVENT", "STATUS", "ATTEMPTS", "LAST", "NEXT")


def cmd_deliveries(ctx: Context, args: argparse.Namespace) -> int:
    params = {"status": args.status} if args.status else {}
    deliveries = ctx.client().list_all(_path(args.id, "deliveries/"), **params)
    if args.output != "table":
        emit(deliveries, args.output, ctx.stdout)
    elif deliveries:
        ctx.stdout.write(table(_DELIVERY_HEADERS, _delivery_rows(deliveries), max_width=140))
    else:
        ctx.warn(f"No deliveries for webhook {args.id} yet.")
    return 0


def cmd_redeliver(ctx: Context, args: argparse.Namespace) -> int:
    if not args.delivery.isdigit():
        raise UsageError(f"a delivery is named by its numeric id, not {args.delivery!r}")
    delivery = ctx.client().post(_path(args.id, f"deliveries/{args.delivery}/redeliver/"))
    if args.output == "table":
        ctx.say(f"delivery/{delivery['id']} queued again ({delivery['message_id']})")
    else:
        emit(delivery, args.output, ctx.stdout)
    return 0


def cmd_ping(ctx: Context, args: argparse.Namespace) -> int:
    delivery = ctx.client().post(_path(args.id, "ping/"))
    if args.output != "table":
        emit(delivery, args.output, ctx.stdout)
        return 0 if delivery["status"] == "succeeded" else 1
    last = (delivery.get("attempt_log") or [{}])[-1]
    if delivery["status"] == "succeeded":
        ctx.say(f"ping delivered: {last.get('status_code')} in {last.get('latency_ms')} ms")
        return 0
    reason = last.get("error") or f"status {last.get('status_code')}"
    ctx.warn(f"ping not delivered ({last.get('error_code') or 'failed'}): {reason}; it will be retried")
    return 1


def cmd_rotate(ctx: Context, args: argparse.Namespace) -> int:
    body = {"grace_seconds": args.grace} if args.grace is not None else {}
    hook = ctx.client().post(_path(args.id, "rotate-secret/"), body)
    if args.output == "table":
        _show_secret(ctx, hook, "secret rotated")
        if hook.get("secret_rotation_ends_at"):
            ctx.say(f"the old secret also signs until {hook['secret_rotation_ends_at']}")
    else:
        emit(hook, args.output, ctx.stdout)
    return 0
