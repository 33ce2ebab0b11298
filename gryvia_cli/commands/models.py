"""`gryvia models …`: inference services (the tenant's and the shared ones) and model aliases.

`apply -f` takes `GryviaInferenceService` and `GryviaModelAlias` manifests (YAML, several documents allowed, or
JSON): each is created, or changed in place when the caller already sees one of that name and kind of ownership.
The upstream credential is never printed; `--credential-env VAR` reads it from the environment, not a file.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from ..context import Context
from ..errors import ApiError, CliError, UsageError
from ..output import emit, emit_many, table
from .common import add_output

SERVICES = "inference-services/"
ALIASES = "model-aliases/"
KINDS = {"GryviaInferenceService": (SERVICES, "inferenceservice"), "GryviaModelAlias": (ALIASES, "modelalias")}


def _path(collection: str, name: str | None = None) -> str:
    return collection if name is None else f"{collection}{urllib.parse.quote(name, safe='')}/"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    models = sub.add_parser("models", parents=[common], help="inference services and model aliases")
    actions = models.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", parents=[common], help="list the inference services the tenant may use")
    add_output(p)
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("get", parents=[common], help="show one inference service")
    p.add_argument("name")
    add_output(p)
    p.set_defaults(func=cmd_get)

    p = actions.add_parser("apply", parents=[common], help="create or change services and aliases from manifests")
    p.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="a GryviaInferenceService or GryviaModelAlias manifest, YAML or JSON; '-' reads stdin; repeatable",
    )
    p.add_argument(
        "--credential-env", metavar="VAR", help="set each service's upstream API key from environment variable VAR"
    )
    add_output(p)
    p.set_defaults(func=cmd_apply)

    p = actions.add_parser("delete", parents=[common], help="delete an inference service")
    p.add_argument("name")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_delete)

    aliases = actions.add_parser("aliases", parents=[common], help="model aliases: a name standing for others")
    alias_actions = aliases.add_subparsers(dest="alias_action", metavar="ACTION", required=True)
    p = alias_actions.add_parser("list", parents=[common], help="list model aliases")
    add_output(p)
    p.set_defaults(func=cmd_aliases_list)
    p = alias_actions.add_parser("create", parents=[common], help="create a model alias")
    p.add_argument("name")
    p.add_argument(
        "--target", dest="targets", action="append", required=True, metavar="MODEL", help="in fallback order; repeat"
    )
    p.add_argument("--shared", action="store_true", help="shared with every tenant (platform admins only)")
    add_output(p)
    p.set_defaults(func=cmd_aliases_create)
    p = alias_actions.add_parser("delete", parents=[common], help="delete a model alias")
    p.add_argument("name")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_aliases_delete)


def _owner(item: dict[str, Any]) -> str:
    return "(shared)" if item.get("shared") else str(item.get("tenant") or "-")


def _service_rows(services: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for s in services:
        status = s.get("status") or {}
        ready = f"{status.get('ready_replicas', 0)}/{s.get('replicas')}" if s.get("runtime") != "external" else "-"
        rows.append([s.get("name"), s.get("model_name"), s.get("runtime"), _owner(s), status.get("phase"), ready])
    return rows


_SERVICE_HEADERS = ("NAME", "MODEL", "RUNTIME", "TENANT", "PHASE", "READY")


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    services = ctx.client().list_all(_path(SERVICES))
    if args.output != "table":
        emit(services, args.output, ctx.stdout)
    elif services:
        ctx.stdout.write(table(_SERVICE_HEADERS, _service_rows(services), max_width=120))
    else:
        ctx.warn("No inference services: create one with `gryvia models apply -f service.yaml`.")
    return 0


def cmd_get(ctx: Context, args: argparse.Namespace) -> int:
    service = ctx.client().get(_path(SERVICES, args.name))
    if args.output == "table":
        ctx.stdout.write(table(_SERVICE_HEADERS, _service_rows([service]), max_width=120))
        message = (service.get("status") or {}).get("message")
        if message:
            ctx.say(f"message: {message}")
    else:
        emit(service, args.output, ctx.stdout)
    return 0


def _documents(path: str, stdin: Any) -> list[tuple[str, Any]]:
    if path == "-":
        text, source = stdin.read(), "<stdin>"
    else:
        try:
            text, source = Path(path).read_text(encoding="utf-8"), path
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        if source.endswith(".json") or text.lstrip().startswith(("{", "[")):
            loaded = json.loads(text)
            items = loaded if isinstance(loaded, list) else [loaded]
        else:
            items = [d for d in yaml.safe_load_all(text) if d is not None]
    except (ValueError, yaml.YAMLError) as exc:
        raise CliError(f"{source}: cannot parse: {exc}") from exc
    return [(f"{source}, document {i}" if len(items) > 1 else source, item) for i, item in enumerate(items, 1)]


def _manifests(args: argparse.Namespace, stdin: Any) -> list[tuple[str, dict[str, Any]]]:
    out = []
    credential = None
    if args.credential_env:
        credential = os.environ.get(args.credential_env)
        if not credential:
            raise UsageError(f"--credential-env: environment variable {args.credential_env} is not set")
    for path in args.files:
        for where, data in _documents(path, stdin):
            if not isinstance(data, dict) or data.get("kind") not in KINDS:
                raise CliError(f"{where}: not a manifest of kind {' or '.join(KINDS)}")
            name = (data.get("metadata") or {}).get("name") if isinstance(data.get("metadata"), dict) else None
            if not isinstance(name, str) or not name:
                raise CliError(f"{where}: metadata.name is required")
            if credential is not None and data["kind"] == "GryviaInferenceService":
                data = {**data, "spec": {**(data.get("spec") or {}), "credential": credential}}
            out.append((where, data))
    if not out:
        raise CliError(f"no manifests in {', '.join(args.files)}")
    return out


def _apply_one(ctx: Context, data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    client = ctx.client()
    collection, _label = KINDS[data["kind"]]
    name = data["metadata"]["name"]
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
    try:
        existing = client.get(_path(collection, name))
    except ApiError as exc:
        if exc.status != 404:
            raise
        existing = None
    if existing is not None and bool(existing.get("shared")) == bool(spec.get("shared")):
        # Name and ownership never change: send the rest.
        change = {**data, "metadata": {k: v for k, v in data["metadata"].items() if k != "name"}}
        change["spec"] = {k: v for k, v in spec.items() if k != "shared"}
        answer = client.request("PATCH", _path(collection, name), json=change)
        return client.decode(answer) or {}, "configured"
    return client.post(_path(collection), data), "created"


def cmd_apply(ctx: Context, args: argparse.Namespace) -> int:
    manifests = _manifests(args, ctx.stdin)
    applied, failures = [], 0
    for where, data in manifests:
        try:
            result, verb = _apply_one(ctx, data)
        except ApiError as exc:
            if len(manifests) == 1 or exc.status == 401:
                raise
            ctx.warn(f"error: {where}: {exc}")
            failures += 1
            continue
        applied.append(result)
        if args.output == "table":
            ctx.say(f"{KINDS[data['kind']][1]}/{result.get('name', data['metadata']['name'])} {verb}")
    if args.output != "table" and applied:
        emit_many(applied, args.output, ctx.stdout)
    return 1 if failures else 0


def _delete(ctx: Context, args: argparse.Namespace, kind: str, label: str) -> int:
    collection, short = KINDS[kind]
    if not args.yes and not ctx.stdin.isatty():
        raise UsageError(f"not deleting {label} {args.name}: stdin is not a terminal to confirm on; pass --yes")
    if not args.yes:
        ctx.stderr.write(f"Delete {label} {args.name}? [y/N] ")
        ctx.stderr.flush()
        if ctx.stdin.readline().strip().lower() not in ("y", "yes"):
            raise CliError(f"aborted: {label} {args.name} was not deleted")
    ctx.client().delete(_path(collection, args.name))
    ctx.say(f"{short}/{args.name} deleted")
    return 0


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    return _delete(ctx, args, "GryviaInferenceService", "inference service")


def cmd_aliases_list(ctx: Context, args: argparse.Namespace) -> int:
    aliases = ctx.client().list_all(_path(ALIASES))
    if args.output != "table":
        emit(aliases, args.output, ctx.stdout)
    elif aliases:
        rows = [[a.get("name"), ", ".join(a.get("targets") or []), _owner(a)] for a in aliases]
        ctx.stdout.write(table(("NAME", "TARGETS", "TENANT"), rows, max_width=120))
    else:
        ctx.warn("No model aliases.")
    return 0


def cmd_aliases_create(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "targets": args.targets}
    if args.shared:
        body["shared"] = True
    alias = ctx.client().post(_path(ALIASES), body)
    if args.output == "table":
        ctx.say(f"modelalias/{alias.get('name', args.name)} created")
    else:
        emit(alias, args.output, ctx.stdout)
    return 0


def cmd_aliases_delete(ctx: Context, args: argparse.Namespace) -> int:
    return _delete(ctx, args, "GryviaModelAlias", "model alias")
