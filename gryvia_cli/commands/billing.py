"""`gryvia catalog …` (the GPU SKU catalog) and `gryvia usage` (priced usage, summed per group).

`catalog apply -f` takes `GryviaGpuSku` manifests (YAML, several documents allowed, or JSON): each is created, or
changed in place when a SKU of that name exists (a price that already priced usage cannot change: end its window
with `effectiveTo` and add a new SKU). Writing the catalog needs a platform admin's credential.
"""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from ..context import Context
from ..errors import ApiError, CliError, UsageError
from ..output import emit, emit_many, table
from .common import add_output
from .models import _documents

SKUS = "skus/"
KIND = "GryviaGpuSku"


def _path(name: str | None = None) -> str:
    return SKUS if name is None else f"{SKUS}{urllib.parse.quote(name, safe='')}/"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    catalog = sub.add_parser("catalog", parents=[common], help="the GPU SKU price catalog")
    actions = catalog.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = actions.add_parser("list", parents=[common], help="list the SKUs (every tenant may read them)")
    p.add_argument("--gpu-type", help="only this GPU type")
    p.add_argument("--in-force", action="store_true", help="only the SKUs in force now")
    add_output(p)
    p.set_defaults(func=cmd_list)
    p = actions.add_parser("apply", parents=[common], help="create or change SKUs from GryviaGpuSku manifests")
    p.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="FILE")
    add_output(p)
    p.set_defaults(func=cmd_apply)
    p = actions.add_parser("delete", parents=[common], help="delete a SKU that priced nothing yet")
    p.add_argument("name")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_delete)

    usage = sub.add_parser("usage", parents=[common], help="priced usage, summed per group")
    usage.add_argument("--start", help="ISO 8601 date or datetime (default: the 1st of this month)")
    usage.add_argument("--end", help="ISO 8601 date (included) or datetime (default: now)")
    usage.add_argument("--group-by", default="day,sku", help="any of tenant,queue,job,sku,model,kind,day")
    usage.add_argument("--job", help="only this job")
    usage.add_argument("--kind", choices=("gpu", "cpu", "tokens", "external", "reservation"))
    usage.add_argument("--csv", action="store_true", help="write CSV (every row) instead of a table")
    add_output(usage)
    usage.set_defaults(func=cmd_usage)


_HEADERS = ("NAME", "GPU TYPE", "RATE/GPU-H", "CURRENCY", "FROM", "TO")


def _rows(skus: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [s.get("name"), s.get("gpu_type"), s.get("hourly_rate"), s.get("currency"), s.get("effective_from"),
         s.get("effective_to") or "-"]
        for s in skus
    ]  # fmt: skip


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    params = {"gpu_type": args.gpu_type, "at": "now" if args.in_force else None}
    skus = ctx.client().list_all(_path(), **params)
    if args.output != "table":
        emit(skus, args.output, ctx.stdout)
    elif skus:
        ctx.stdout.write(table(_HEADERS, _rows(skus), max_width=120))
    else:
        ctx.warn("The catalog is empty: a platform admin adds prices with `gryvia catalog apply -f sku.yaml`.")
    return 0


def cmd_apply(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    applied = []
    for path in args.files:
        for where, data in _documents(path, ctx.stdin):
            if not isinstance(data, dict) or data.get("kind") != KIND:
                raise CliError(f"{where}: not a {KIND} manifest")
            name = (data.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not name:
                raise CliError(f"{where}: metadata.name is required")
            try:
                client.get(_path(name))
                exists = True
            except ApiError as exc:
                if exc.status != 404:
                    raise
                exists = False
            if exists:
                change = {**data, "metadata": {}}
                result, verb = client.decode(client.request("PATCH", _path(name), json=change)), "configured"
            else:
                result, verb = client.post(_path(), data), "created"
            applied.append(result)
            if args.output == "table":
                ctx.say(f"gpusku/{name} {verb}")
    if args.output != "table" and applied:
        emit_many(applied, args.output, ctx.stdout)
    return 0


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    if not args.yes and not ctx.stdin.isatty():
        raise UsageError(f"not deleting SKU {args.name}: stdin is not a terminal to confirm on; pass --yes")
    if not args.yes:
        ctx.stderr.write(f"Delete SKU {args.name}? [y/N] ")
        ctx.stderr.flush()
        if ctx.stdin.readline().strip().lower() not in ("y", "yes"):
            raise CliError(f"aborted: SKU {args.name} was not deleted")
    ctx.client().delete(_path(args.name))
    ctx.say(f"gpusku/{args.name} deleted")
    return 0


def cmd_usage(ctx: Context, args: argparse.Namespace) -> int:
    params = {"start": args.start, "end": args.end, "group_by": args.group_by, "job": args.job, "kind": args.kind}
    client = ctx.client()
    if args.csv:
        response = client.request("GET", "usage/", params={**params, "format": "csv"}, accept="text/csv")
        ctx.stdout.write(response.text)
        return 0
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    for page in client.pages("usage/", **params):
        report = page
        rows += page.get("results") or []
    if args.output != "table":
        emit({**report, "results": rows, "next": None, "previous": None}, args.output, ctx.stdout)
        return 0
    groups = report.get("group_by") or []
    metrics = ("records", "open", "gpu_hours", "input_tokens", "output_tokens", "cost", "currency")
    if rows:
        headers = [g.upper() for g in groups] + [m.upper().replace("_", " ") for m in metrics]
        ctx.stdout.write(table(headers, [[r.get(k) for k in (*groups, *metrics)] for r in rows], max_width=120))
    else:
        ctx.warn("No usage in this window.")
    for total in report.get("totals") or []:
        ctx.say(
            f"total: {total['cost']} {total['currency']} ({total['gpu_hours']} GPU-hours, {total['records']} records)"
        )
    return 0
