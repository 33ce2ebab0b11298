"""`gryvia queues …`: the tenant's queues (quota per GPU type, CPU, memory; cohort; weight) and their usage."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from ..context import Context
from ..errors import UsageError
from ..output import emit, table
from .common import add_output, positive_int


def _path(name: str | None = None) -> str:
    return "queues/" if name is None else f"queues/{urllib.parse.quote(name, safe='')}/"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    queues = sub.add_parser("queues", parents=[common], help="queues: quotas, cohorts, usage")
    actions = queues.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", parents=[common], help="list the tenant's queues")
    add_output(p)
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("get", parents=[common], help="show one queue")
    p.add_argument("name")
    add_output(p)
    p.set_defaults(func=cmd_get)

    p = actions.add_parser("create", parents=[common], help="create a queue with a GPU quota")
    p.add_argument("name")
    p.add_argument("--gpus", type=positive_int, required=True, help="nominal GPU quota")
    p.add_argument("--gpu-type", default="", help="the GPU type (flavor) the quota is for, e.g. H100")
    p.add_argument("--borrowing-limit", type=int, help="GPUs it may borrow from its cohort (default: no limit)")
    p.add_argument("--lending-limit", type=int, help="GPUs it may lend to its cohort (default: no limit)")
    p.add_argument("--cohort", help="the cohort it shares idle quota with")
    p.add_argument("--weight", type=float, help="fair-share weight (default 1)")
    add_output(p)
    p.set_defaults(func=cmd_create)

    p = actions.add_parser("delete", parents=[common], help="delete a queue")
    p.add_argument("name")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_delete)


def _quota_text(queue: dict[str, Any]) -> str:
    parts = []
    for quota in queue.get("quotas") or []:
        name = quota["resource"] + (f" ({quota['flavor']})" if quota.get("flavor") else "")
        parts.append(f"{quota['nominal']} {name}")
    return ", ".join(parts) or "unlimited"


def _rows(queues: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [q.get("name"), q.get("cohort") or "-", q.get("weight"), _quota_text(q), (q.get("status") or {}).get("pending")]
        for q in queues
    ]


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    queues = ctx.client().list_all(_path())
    if args.output != "table":
        emit(queues, args.output, ctx.stdout)
    elif queues:
        ctx.stdout.write(table(("NAME", "COHORT", "WEIGHT", "QUOTA", "PENDING"), _rows(queues), max_width=120))
    else:
        ctx.warn("No queues: jobs go to the implicit, unlimited `default` queue.")
    return 0


def cmd_get(ctx: Context, args: argparse.Namespace) -> int:
    queue = ctx.client().get(_path(args.name))
    if args.output == "table":
        ctx.stdout.write(table(("NAME", "COHORT", "WEIGHT", "QUOTA", "PENDING"), _rows([queue]), max_width=120))
    else:
        emit(queue, args.output, ctx.stdout)
    return 0


def cmd_create(ctx: Context, args: argparse.Namespace) -> int:
    quota: dict[str, Any] = {"resource": "nvidia.com/gpu", "nominal": args.gpus}
    if args.gpu_type:
        quota["flavor"] = args.gpu_type
    if args.borrowing_limit is not None:
        quota["borrowingLimit"] = args.borrowing_limit
    if args.lending_limit is not None:
        quota["lendingLimit"] = args.lending_limit
    body: dict[str, Any] = {"name": args.name, "quotas": [quota]}
    if args.cohort:
        body["cohort"] = args.cohort
    if args.weight is not None:
        body["weight"] = args.weight
    queue = ctx.client().post(_path(), body)
    if args.output == "table":
        ctx.say(f"queue/{queue.get('name', args.name)} created")
    else:
        emit(queue, args.output, ctx.stdout)
    return 0


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    if not args.yes and not ctx.stdin.isatty():
        raise UsageError(f"not deleting queue {args.name}: stdin is not a terminal to confirm on; pass --yes")
    ctx.client().delete(_path(args.name))
    ctx.say(f"queue/{args.name} deleted")
    return 0
