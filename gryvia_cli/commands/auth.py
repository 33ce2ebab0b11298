"""`gryvia login`, `gryvia logout`, `gryvia whoami`."""

from __future__ import annotations

import argparse
import getpass
from typing import Any
from urllib.parse import urlsplit

from ..client import Client, OAuthTokens
from ..config import ENV_API_KEY
from ..context import Context
from ..errors import ApiError, CliError, UsageError
from ..oauth import DEFAULT_SCOPE, DEVICE_CLIENT_ID, device_login, revoke
from ..output import emit, tenants_table
from .common import add_output

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def register(sub: Any, common: argparse.ArgumentParser, common_without_key: argparse.ArgumentParser) -> None:
    login = sub.add_parser(
        "login",
        parents=[common_without_key],
        help="save a credential for the server",
        description="Check a credential against the server and save it (mode 0600) in the config file. "
        "Without --api-key or --device, a key is asked for on a terminal.",
    )
    how = login.add_mutually_exclusive_group()
    how.add_argument(
        "--api-key",
        default=argparse.SUPPRESS,
        metavar="KEY",
        help="the API key to save ('-' reads it from stdin; default $GRYVIA_API_KEY)",
    )
    how.add_argument("--device", action="store_true", help="sign in in a browser (OAuth device flow)")
    login.add_argument("--client-id", default=DEVICE_CLIENT_ID, help=argparse.SUPPRESS)
    login.add_argument("--scope", default=DEFAULT_SCOPE, help=argparse.SUPPRESS)
    login.set_defaults(func=cmd_login)

    logout = sub.add_parser("logout", parents=[common], help="forget the saved credential")
    logout.set_defaults(func=cmd_logout)

    whoami = sub.add_parser("whoami", parents=[common], help="list the tenants the credential sees")
    add_output(whoami)
    whoami.set_defaults(func=cmd_whoami)


def _tenants(client: Client) -> list[dict[str, Any]]:
    return client.list_all("tenants/")


def _check(client: Client, what: str) -> list[dict[str, Any]]:
    """The tenants a new credential sees; a refusal becomes a clear error and nothing is saved."""
    try:
        return _tenants(client)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise CliError(f"{client.url} did not accept {what}: {exc.message}") from exc
        raise


def _read_key(ctx: Context, args: argparse.Namespace) -> str:
    key = getattr(args, "api_key", None)
    if key == "-":
        key = ctx.stdin.readline().strip()
    elif not key and ctx.settings.credential_source == ENV_API_KEY:
        key = ctx.settings.api_key
    elif not key and ctx.stdin.isatty():
        key = getpass.getpass("API key: ", stream=ctx.stderr).strip()
    if not key:
        raise UsageError("give an API key with --api-key KEY (or '-' to read it from stdin), or use --device")
    return key


def _warn_plain_http(ctx: Context) -> None:
    parts = urlsplit(ctx.settings.url)
    if parts.scheme == "http" and (parts.hostname or "") not in LOOPBACK:
        ctx.warn(f"warning: {ctx.settings.url} is plain HTTP: the credential travels unencrypted")


def cmd_login(ctx: Context, args: argparse.Namespace) -> int:
    settings = ctx.settings
    _warn_plain_http(ctx)
    if args.device:
        anonymous = ctx.make_client()
        tokens = device_login(anonymous, out=ctx.stderr, client_id=args.client_id, scope=args.scope)
        tenants = _check(ctx.make_client(oauth=OAuthTokens(tokens)), "the sign-in")
        settings.config.set_credentials(settings.url, oauth=tokens, tenant=settings.tenant)
        how = "signed in"
    else:
        key = _read_key(ctx, args)
        tenants = _check(ctx.make_client(api_key=key), "this API key")
        settings.config.set_credentials(settings.url, api_key=key, tenant=settings.tenant)
        how = "API key saved"
    settings.config.save()
    names = ", ".join(t.get("slug", "?") for t in tenants) or "none"
    ctx.say(f"Logged in to {settings.url} ({how} in {settings.config.path}); tenants: {names}")
    return 0


def cmd_logout(ctx: Context, args: argparse.Namespace) -> int:
    config = ctx.settings.config
    tokens, url = config.oauth, config.url
    if not config.clear_credentials():
        ctx.say(f"Not logged in (no credential in {config.path}).")
        return 0
    config.save()
    if tokens and url:
        with Client(url, retries=0) as client:
            if not revoke(client, tokens):
                ctx.warn(f"note: {url} did not confirm revoking the tokens; they expire on their own")
    ctx.say(f"Logged out of {url or ctx.settings.url}: removed the credential from {config.path}")
    return 0


def cmd_whoami(ctx: Context, args: argparse.Namespace) -> int:
    tenants = _tenants(ctx.client())
    if args.output != "table":
        emit(tenants, args.output, ctx.stdout)
        return 0
    ctx.say(f"{ctx.settings.url} as {ctx.settings.describe_credential()}")
    if tenants:
        ctx.stdout.write(tenants_table(tenants))
    else:
        ctx.say("This credential sees no tenants.")
    return 0
