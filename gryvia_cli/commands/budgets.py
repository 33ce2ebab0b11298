"""`gryvia budgets …`: spending limits per tenant (or cost center) and period, and the month-end forecast.

`create NAME --amount 500` makes a monthly budget with thresholds 50/80/100 %; `--hard-limit` holds new jobs whose
forecast cost would exceed it; `--start`/`--end` make a custom period. `create -f` takes `GryviaBudget` manifests.
Writing needs `billing:write` in the tenant (tenant admins) or a platform admin's credential.
"""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from ..context import Context
from ..errors import CliError, UsageError
from ..output import emit, emit_many, table
from .common import add_output
from .models import _documents

KIND = "GryviaBudget"


def _path(name: str | None = None) -> str:
    return "budgets/" if name is None else f"budgets/{urllib.parse.quote(name, safe='')}/"


def _thresholds(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of percentages") from None


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    budgets = sub.add_parser("budgets", parents=[common], help="budgets: spending limits, thresholds, forecast")
    actions = budgets.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", parents=[common], help="list budgets with their spend and state")
    p.add_argument("--no-forecast", action="store_true", help="leave out the month-end forecast")
    add_output(p)
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("show", parents=[common], help="show one budget")
    p.add_argument("name")
    add_output(p)
    p.set_defaults(func=cmd_show)

    p = actions.add_parser("create", parents=[common], help="create a budget (flags, or -f GryviaBudget manifests)")
    p.add_argument("name", nargs="?")
    p.add_argument("-f", "--filename", dest="files", action="append", metavar="FILE")
    p.add_argument("--amount", help="the limit, e.g. 500.00")
    p.add_argument("--currency", help="ISO 4217 code (default USD)")
    p.add_argument("--thresholds", type=_thresholds, help="percentages (default 50,80,100)")
    p.add_argument("--hard-limit", action="store_true", help="hold new jobs whose forecast cost would exceed it")
    p.add_argument("--start", help="custom period: its start (ISO 8601)")
    p.add_argument("--end", help="custom period: its end, exclusive (ISO 8601)")
    p.add_argument("--cost-center", help="a cost center's budget (platform admins)")
    p.add_argument("--description")
    add_output(p)
    p.set_defaults(func=cmd_create)

    p = actions.add_parser("delete", parents=[common], help="delete a budget")
    p.add_argument("name")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_delete)

    p = actions.add_parser("forecast", parents=[common], help="month-end spend: so far plus what runs now")
    add_output(p)
    p.set_defaults(func=cmd_forecast)


_HEADERS = ("NAME", "SCOPE", "PERIOD", "AMOUNT", "SPENT", "USED", "STATE", "HARD", "CROSSED")


def _row(budget: dict[str, Any]) -> list[Any]:
    status = budget.get("status") or {}
    scope = f"cost-center/{budget['cost_center']}" if budget.get("cost_center") else budget.get("tenant")
    period = budget.get("period")
    if period == "custom":
        period = f"{(budget.get('start') or '')[:10]}..{(budget.get('end') or '')[:10]}"
    return [
        budget.get("name"),
        scope,
        period,
        f"{budget.get('amount')} {budget.get('currency')}",
        status.get("spent"),
        f"{status.get('percent')}%",
        status.get("state"),
        "yes" if budget.get("hard_limit") else "no",
        ",".join(f"{t}%" for t in status.get("crossed") or []) or "-",
    ]


def _forecast_lines(forecast: dict[str, Any]) -> list[str]:
    lines = []
    for entry in forecast.get("tenants") or []:
        lines.append(
            f"forecast {entry['tenant']}: {entry['projected']} {entry['currency']} by {forecast['end'][:10]} "
            f"(spent {entry['spent']}, running {entry['running']})"
        )
        for budget in entry.get("budgets") or []:
            verdict = "within" if budget["sufficient"] else "over"
            lines.append(f"  budget {budget['name']}: {budget['projected_percent']}% of {budget['amount']} ({verdict})")
    return lines


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    budgets = client.list_all(_path())
    if args.output != "table":
        emit(budgets, args.output, ctx.stdout)
        return 0
    if budgets:
        ctx.stdout.write(table(_HEADERS, [_row(b) for b in budgets], max_width=120))
    else:
        ctx.warn("No budgets: create one with `gryvia budgets create NAME --amount 500`.")
    if not args.no_forecast:
        for line in _forecast_lines(client.get("usage/forecast/")):
            ctx.say(line)
    return 0


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    budget = ctx.client().get(_path(args.name))
    if args.output != "table":
        emit(budget, args.output, ctx.stdout)
        return 0
    ctx.stdout.write(table(_HEADERS, [_row(budget)], max_width=120))
    status = budget.get("status") or {}
    ctx.say(f"thresholds: {', '.join(f'{t}%' for t in budget.get('thresholds') or []) or 'none'}")
    if status.get("message"):
        ctx.say(status["message"])
    return 0


def cmd_create(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    bodies: list[tuple[str, Any]] = []
    if args.files:
        if args.name or args.amount:
            raise UsageError("give either -f FILE or NAME --amount ..., not both")
        for path in args.files:
            for where, data in _documents(path, ctx.stdin):
                if not isinstance(data, dict) or data.get("kind") != KIND:
                    raise CliError(f"{where}: not a {KIND} manifest")
                bodies.append((str((data.get("metadata") or {}).get("name") or where), data))
    else:
        if not args.name or args.amount is None:
            raise UsageError("NAME and --amount are required (or -f FILE)")
        body: dict[str, Any] = {"name": args.name, "amount": args.amount, "hard_limit": args.hard_limit}
        if args.start or args.end:
            body.update(period="custom", start=args.start, end=args.end)
        optional = {"currency": args.currency, "thresholds": args.thresholds, "description": args.description}
        optional["cost_center"] = args.cost_center
        body.update({key: value for key, value in optional.items() if value is not None})
        bodies.append((args.name, body))
    created = []
    for name, body in bodies:
        budget = client.post(_path(), body)
        created.append(budget)
        if args.output == "table":
            state = (budget.get("status") or {}).get("message") or ""
            ctx.say(f"budget/{name} created" + (f": {state}" if state else ""))
    if args.output != "table":
        emit_many(created, args.output, ctx.stdout)
    return 0


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    if not args.yes:
        if not ctx.stdin.isatty():
            raise UsageError(f"not deleting budget {args.name}: stdin is not a terminal to confirm on; pass --yes")
        ctx.stderr.write(f"Delete budget {args.name}? [y/N] ")
        ctx.stderr.flush()
        if ctx.stdin.readline().strip().lower() not in ("y", "yes"):
            raise CliError(f"aborted: budget {args.name} was not deleted")
    ctx.client().delete(_path(args.name))
    ctx.say(f"budget/{args.name} deleted")
    return 0


_FORECAST_HEADERS = ("TENANT", "CURRENCY", "SPENT", "RUNNING", "PROJECTED", "UNTIL")


def cmd_forecast(ctx: Context, args: argparse.Namespace) -> int:
    forecast = ctx.client().get("usage/forecast/", tenant=getattr(args, "tenant", None))
    if args.output != "table":
        emit(forecast, args.output, ctx.stdout)
        return 0
    rows = [
        [e["tenant"], e["currency"], e["spent"], e["running"], e["projected"], forecast["end"][:10]]
        for e in forecast.get("tenants") or []
    ]
    if rows:
        ctx.stdout.write(table(_FORECAST_HEADERS, rows, max_width=120))
    else:
        ctx.warn("Nothing spent or running this month.")
    for entry in forecast.get("tenants") or []:
        for budget in entry.get("budgets") or []:
            verdict = "within" if budget["sufficient"] else "over"
            ctx.say(f"{entry['tenant']} budget {budget['name']}: {budget['projected_percent']}% projected ({verdict})")
    return 0
