"""`gryvia`: argument parsing and dispatch, and the one place errors become messages and exit statuses.

Exit statuses: 0 success, 1 an error (the API's message on stderr), 2 a usage error, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import __version__
from .commands import auth, billing, budgets, hooks, invoices, jobs, models, queues
from .config import ENV_API_KEY, ENV_CONFIG, ENV_TENANT, ENV_URL, resolve
from .context import Context
from .errors import EXIT_INTERRUPTED, EXIT_USAGE, ApiError, CliError
from .output import clean

EXIT_BROKEN_PIPE = 141


def _common(*, with_api_key: bool) -> argparse.ArgumentParser:
    """Global options, accepted before or after the command (defaults suppressed so neither overrides the other)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("global options")
    group.add_argument("--url", default=argparse.SUPPRESS, help=f"the Gryvia server (${ENV_URL}, else the config)")
    if with_api_key:
        group.add_argument(
            "--api-key", default=argparse.SUPPRESS, metavar="KEY", help=f"an API key (${ENV_API_KEY}, else the config)"
        )
    group.add_argument(
        "--tenant", default=argparse.SUPPRESS, metavar="SLUG", help=f"act in this tenant (${ENV_TENANT})"
    )
    group.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help=f"the config file (${ENV_CONFIG}, default ~/.config/gryvia/config.json)",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    common = _common(with_api_key=True)
    parser = argparse.ArgumentParser(
        prog="gryvia",
        parents=[common],
        description="The command-line tool of Gryvia: submit and manage AI jobs on a multi-tenant GPU cluster.",
        epilog="Run `gryvia COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"gryvia {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    auth.register(sub, common, _common(with_api_key=False))
    jobs.register(sub, common)
    queues.register(sub, common)
    models.register(sub, common)
    hooks.register(sub, common)
    billing.register(sub, common)
    budgets.register(sub, common)
    invoices.register(sub, common)
    return parser


def _hint(exc: ApiError, ctx: Context) -> str:
    """What to do about a 401, given the credential that was used."""
    settings = ctx.settings
    if not settings.has_credential:
        notes = "".join(f"; {note}" for note in settings.notes)
        return f"not logged in to {settings.url}{notes}: run `gryvia login` or pass --api-key"
    if settings.oauth and not settings.api_key:
        return "the saved sign-in has expired or was revoked: run `gryvia login --device` again"
    return f"check the API key (from {settings.credential_source})"


def _quiet_stdout() -> None:
    """After a broken pipe (`gryvia jobs logs x | head`): point stdout at /dev/null so exit is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (the console script passes it to sys.exit)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    ctx: Context | None = None
    try:
        settings = resolve(
            url=getattr(args, "url", None),
            api_key=getattr(args, "api_key", None) if args.command != "login" else None,
            tenant=getattr(args, "tenant", None),
            config_path=getattr(args, "config", None),
        )
        if args.command == "login" and getattr(args, "api_key", None) not in (None, "-"):
            settings.api_key, settings.credential_source = args.api_key, "--api-key"
        ctx = Context(settings, sys.stdout, sys.stderr, sys.stdin)
        return int(args.func(ctx, args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except CliError as exc:
        if isinstance(exc, ApiError) and exc.status == 401 and ctx is not None and not exc.hint:
            exc.hint = _hint(exc, ctx)
        lines = str(exc).splitlines() or ["failed"]
        sys.stderr.write("error: " + "\n".join(clean(line) for line in lines) + "\n")
        if exc.exit_code == EXIT_USAGE:
            sys.stderr.write("(run `gryvia --help` for usage)\n")
        return exc.exit_code
    finally:
        if ctx is not None:
            ctx.close()


__all__ = ["build_parser", "main"]
