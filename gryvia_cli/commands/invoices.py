"""`gryvia invoices …` (estimates, the Draft -> Finalized -> Paid or Void lifecycle, sending to Stripe in test mode),
`gryvia cost-centers …` and `gryvia chargeback` (the report of a period per cost center).

Tenant credentials read their own invoices and estimates; creating, finalizing, paying, voiding, cost centers and
chargeback need a platform credential (with `admin` for changes). The global `--tenant` names the tenant of a list,
an estimate or a new invoice. An invoice is named by its id or its number.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..context import Context
from ..errors import CliError, UsageError
from ..output import emit, table
from .common import add_output

INVOICES = "invoices/"
COST_CENTERS = "cost-centers/"


def _period(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--month", help="YYYY-MM (instead of --start and --end)")
    parser.add_argument(
        "--start", help="ISO 8601 date or datetime (UTC)" + ("" if required else "; default: 1st of the month")
    )
    parser.add_argument(
        "--end", help="ISO 8601 date (included) or datetime (exclusive)" + ("" if required else "; default: now")
    )


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    invoices = sub.add_parser("invoices", parents=[common], help="invoices: estimates, drafts, finalized, paid, void")
    actions = invoices.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = actions.add_parser("list", parents=[common], help="list invoices (newest period first)")
    p.add_argument("--state", choices=("draft", "finalized", "paid", "void"))
    add_output(p)
    p.set_defaults(func=cmd_list)
    p = actions.add_parser("show", parents=[common], help="one invoice, with its lines")
    p.add_argument("invoice", help="its id or number (INV-<tenant>-NNNNNN)")
    p.add_argument("--csv", action="store_true", help="write its lines as CSV")
    p.add_argument("--html", action="store_true", help="write its printable HTML page")
    add_output(p)
    p.set_defaults(func=cmd_show)
    p = actions.add_parser("estimate", parents=[common], help="what an invoice of a period would hold now")
    _period(p, required=False)
    p.add_argument("--csv", action="store_true", help="write CSV instead of a table")
    add_output(p)
    p.set_defaults(func=cmd_estimate)
    p = actions.add_parser("create", parents=[common], help="a draft for --tenant and a period (platform admins)")
    _period(p, required=True)
    p.add_argument("--note", default="", help="printed on the invoice")
    p.add_argument("--finalize", action="store_true", help="finalize the draft at once")
    add_output(p)
    p.set_defaults(func=cmd_create)
    p = actions.add_parser("finalize", parents=[common], help="finalize a draft: checks, then the next number")
    p.add_argument("invoice")
    add_output(p)
    p.set_defaults(func=cmd_action, verb="finalize", body=lambda a: {})
    p = actions.add_parser("pay", parents=[common], help="mark a finalized invoice paid")
    p.add_argument("invoice")
    p.add_argument("--reference", default="", help="the payment's reference")
    p.add_argument("--paid-at", help="when it was paid (ISO 8601; default: now)")
    add_output(p)
    p.set_defaults(func=cmd_action, verb="mark-paid", body=_pay_body)
    p = actions.add_parser("void", parents=[common], help="void a draft or a finalized invoice")
    p.add_argument("invoice")
    p.add_argument("--reason", required=True, help="why (3 to 500 characters)")
    add_output(p)
    p.set_defaults(func=cmd_action, verb="void", body=lambda a: {"reason": a.reason})
    p = actions.add_parser("send", parents=[common], help="send a finalized invoice to Stripe (test mode)")
    p.add_argument("invoice")
    add_output(p)
    p.set_defaults(func=cmd_send)
    p = actions.add_parser("delete", parents=[common], help="delete a draft")
    p.add_argument("invoice")
    p.set_defaults(func=cmd_delete)

    centers = sub.add_parser("cost-centers", parents=[common], help="chargeback's cost centers (platform)")
    actions = centers.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = actions.add_parser("list", parents=[common], help="list cost centers and their tenants")
    add_output(p)
    p.set_defaults(func=cmd_centers_list)
    for name, what in (("create", "add a cost center"), ("update", "change a cost center")):
        p = actions.add_parser(name, parents=[common], help=what)
        p.add_argument("code")
        p.add_argument("--name", required=name == "create")
        p.add_argument("--overhead", metavar="PERCENT", help="platform overhead in percent (0 to 1000)")
        p.add_argument("--description")
        p.add_argument("--tenants", help="comma-separated slugs: exactly the tenants charged to it")
        add_output(p)
        p.set_defaults(func=cmd_centers_write, create=name == "create")
    p = actions.add_parser("delete", parents=[common], help="delete a cost center (its tenants become unassigned)")
    p.add_argument("code")
    p.set_defaults(func=cmd_centers_delete)

    report = sub.add_parser("chargeback", parents=[common], help="the chargeback report of a period (platform)")
    _period(report, required=True)
    report.add_argument("--source", choices=("invoices", "estimates"), default="invoices")
    report.add_argument("--csv", action="store_true", help="write CSV instead of a table")
    add_output(report)
    report.set_defaults(func=cmd_chargeback)


def _period_params(args: argparse.Namespace) -> dict[str, Any]:
    return {"month": args.month, "start": args.start, "end": args.end}


def _pay_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"reference": args.reference}
    if args.paid_at:
        body["paid_at"] = args.paid_at
    return body


def _id(ctx: Context, ref: str) -> str:
    """An invoice's id, from its id or its number."""
    if ref.isdigit():
        return ref
    found = ctx.client().get(INVOICES, number=ref).get("results") or []
    if not found:
        raise CliError(f"no invoice {ref!r}")
    return str(found[0]["id"])


_HEADERS = ("ID", "NUMBER", "TENANT", "STATE", "PERIOD START", "PERIOD END", "TOTAL", "CURRENCY")


def _row(i: dict[str, Any]) -> list[Any]:
    return [i["id"], i.get("number") or "-", i["tenant"], i["state"], i["period_start"], i["period_end"],
            i["subtotal"], i.get("currency") or "-"]  # fmt: skip


def _lines(ctx: Context, lines: list[dict[str, Any]]) -> None:
    headers = ("#", "DESCRIPTION", "RECORDS", "GPU-HOURS", "RATE", "AMOUNT", "CURRENCY")
    rows = [[ln["position"], ln["description"], ln["entries"], ln["gpu_hours"], ln.get("rate") or "-", ln["amount"],
             ln["currency"]] for ln in lines]  # fmt: skip
    ctx.stdout.write(table(headers, rows, max_width=120))


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    invoices = ctx.client().list_all(INVOICES, state=args.state)
    if args.output != "table":
        emit(invoices, args.output, ctx.stdout)
    elif invoices:
        ctx.stdout.write(table(_HEADERS, [_row(i) for i in invoices], max_width=120))
    else:
        ctx.warn("No invoices.")
    return 0


def _show(ctx: Context, invoice: dict[str, Any], output: str) -> None:
    if output != "table":
        emit(invoice, output, ctx.stdout)
        return
    name = invoice.get("number") or f"draft {invoice['id']}"
    ctx.say(
        f"{name}: {invoice['state']}, tenant {invoice['tenant']}, {invoice['period_start']} to {invoice['period_end']}"
    )
    _lines(ctx, invoice["lines"])
    ctx.say(f"total: {invoice['subtotal']} {invoice['currency']} ({invoice['ledger_entries']} ledger entries)")


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    path = f"{INVOICES}{_id(ctx, args.invoice)}/"
    if args.csv or args.html:
        accept = "text/csv" if args.csv else "text/html"
        response = client.request(
            "GET", path + ("html/" if args.html else ""), params={"format": "csv"} if args.csv else None, accept=accept
        )
        ctx.stdout.write(response.text)
        return 0
    _show(ctx, client.get(path), args.output)
    return 0


def cmd_estimate(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    params = _period_params(args)
    if args.csv:
        response = client.request("GET", f"{INVOICES}estimate/", params={**params, "format": "csv"}, accept="text/csv")
        ctx.stdout.write(response.text)
        return 0
    estimate = client.get(f"{INVOICES}estimate/", **params)
    if args.output != "table":
        emit(estimate, args.output, ctx.stdout)
        return 0
    ctx.say(f"estimate for {estimate['tenant']}, {estimate['start']} to {estimate['end']}")
    if estimate["lines"]:
        _lines(ctx, estimate["lines"])
    for total in estimate["totals"]:
        ctx.say(f"total: {total['subtotal']} {total['currency']}")
    for problem in estimate["problems"]:
        ctx.warn(f"would not finalize: {problem}")
    return 0


def cmd_create(ctx: Context, args: argparse.Namespace) -> int:
    if not ctx.settings.tenant:
        raise UsageError("name the tenant invoiced with --tenant SLUG")
    client = ctx.client()
    body = {"tenant": ctx.settings.tenant, "note": args.note, **{k: v for k, v in _period_params(args).items() if v}}
    invoice = client.post(INVOICES, body)
    if args.finalize:
        invoice = client.post(f"{INVOICES}{invoice['id']}/finalize/")
    if args.output == "table":
        ctx.say(f"invoice {invoice.get('number') or invoice['id']} {invoice['state']}")
    _show(ctx, invoice, args.output)
    return 0


def cmd_action(ctx: Context, args: argparse.Namespace) -> int:
    invoice = ctx.client().post(f"{INVOICES}{_id(ctx, args.invoice)}/{args.verb}/", args.body(args))
    if args.output != "table":
        emit(invoice, args.output, ctx.stdout)
    else:
        ctx.say(f"invoice {invoice.get('number') or invoice['id']} {invoice['state']}")
    return 0


def cmd_send(ctx: Context, args: argparse.Namespace) -> int:
    invoice = ctx.client().post(f"{INVOICES}{_id(ctx, args.invoice)}/stripe/")
    if args.output != "table":
        emit(invoice, args.output, ctx.stdout)
        return 0
    sent = invoice["stripe"]
    ctx.say(f"invoice {invoice['number']} sent to Stripe as {sent['invoice_id']} ({sent['status']})")
    if sent["hosted_url"]:
        ctx.say(f"payable at {sent['hosted_url']}")
    return 0


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    invoice_id = _id(ctx, args.invoice)
    ctx.client().delete(f"{INVOICES}{invoice_id}/")
    ctx.say(f"invoice {invoice_id} deleted")
    return 0


def cmd_centers_list(ctx: Context, args: argparse.Namespace) -> int:
    centers = ctx.client().list_all(COST_CENTERS)
    if args.output != "table":
        emit(centers, args.output, ctx.stdout)
    elif centers:
        rows = [[c["code"], c["name"], c["overhead_percent"], ",".join(c["tenants"]) or "-"] for c in centers]
        ctx.stdout.write(table(("CODE", "NAME", "OVERHEAD %", "TENANTS"), rows, max_width=120))
    else:
        ctx.warn("No cost centers: every tenant is unassigned.")
    return 0


def cmd_centers_write(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    for key, value in (("name", args.name), ("overhead_percent", args.overhead), ("description", args.description)):
        if value is not None:
            body[key] = value
    if args.tenants is not None:
        body["tenants"] = [s.strip() for s in args.tenants.split(",") if s.strip()]
    client = ctx.client()
    if args.create:
        center = client.post(COST_CENTERS, {"code": args.code, **body})
    else:
        if not body:
            raise UsageError("nothing to change: give --name, --overhead, --description or --tenants")
        center = client.decode(client.request("PATCH", f"{COST_CENTERS}{args.code}/", json=body))
    if args.output != "table":
        emit(center, args.output, ctx.stdout)
    else:
        ctx.say(f"costcenter/{center['code']} {'created' if args.create else 'configured'}")
    return 0


def cmd_centers_delete(ctx: Context, args: argparse.Namespace) -> int:
    ctx.client().delete(f"{COST_CENTERS}{args.code}/")
    ctx.say(f"costcenter/{args.code} deleted")
    return 0


def cmd_chargeback(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    params = {**_period_params(args), "source": args.source}
    if args.csv:
        ctx.stdout.write(
            client.request("GET", "chargeback/", params={**params, "format": "csv"}, accept="text/csv").text
        )
        return 0
    report = client.get("chargeback/", **params)
    if args.output != "table":
        emit(report, args.output, ctx.stdout)
        return 0
    rows = [[r["cost_center"], t["tenant"], " ".join(t["invoices"]) or "-", t["amount"], t["overhead"], t["total"],
             t["currency"]] for r in report["rows"] for t in r["tenants"]]  # fmt: skip
    if rows:
        headers = ("COST CENTER", "TENANT", "INVOICES", "AMOUNT", "OVERHEAD", "TOTAL", "CURRENCY")
        ctx.stdout.write(table(headers, rows, max_width=120))
    else:
        ctx.warn(f"Nothing to charge back in this period (source: {report['source']}).")
    for total in report["totals"]:
        ctx.say(
            f"total: {total['total']} {total['currency']} ({total['amount']} invoiced + {total['overhead']} overhead)"
        )
    return 0
