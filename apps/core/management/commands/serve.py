"""Serve Gryvia with uvicorn (ASGI). Without REDIS_URL the embedded ticker runs reconcilers in this process.

While it serves, $GRYVIA_DATA_DIR/server.json holds its URL and pid: the `gryvia` CLI on this machine reads it, so
the README's commands reach a server on any GRYVIA_PORT without flags (gryvia_cli.config.local_server_url).

Ctrl-C or SIGTERM stops the server and the ticker, runs the apps' stop hooks (apps.core.lifecycle: the gateway's
last usage rows), and closes the cluster backend (which, for the local backend, ends the workload processes it runs:
the job reconciler runs those jobs again from their checkpoints at the next start).
"""

import json
import logging
import os
import signal
from pathlib import Path

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import import_string

from apps.cluster.services import NodeBusyError, claim_local_node, set_backend
from apps.core.db.heap import freeze_startup_heap
from apps.core.lifecycle import serve_stop_hooks
from apps.core.periodic import Ticker
from apps.core.security import AccessLogScrubber

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the ASGI server (and, in the embedded profile, the periodic ticker)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=None)

    def handle(self, *args, host: str, port: int | None, **options) -> None:
        application = import_string(settings.ASGI_APPLICATION)
        # Loaded before the ticker starts: what the process keeps for life is no longer walked by full collections.
        freeze_startup_heap()
        ticker = None if settings.REDIS_URL else Ticker()
        if ticker is not None:
            try:  # this process runs the local backend's workloads: refused at once if another one does
                claim_local_node()
            except NodeBusyError as exc:
                raise CommandError(str(exc)) from None
            ticker.start()
        else:
            self.stdout.write(
                "REDIS_URL is set: this server runs no periodic work (reconcilers, webhook deliveries, metering). "
                "Run `make worker` and `make beat` beside it; GET /readyz?verbose reports whether they are seen."
            )
        port = port or settings.GRYVIA_PORT
        url = local_url(host, port)
        advertised = advertise(settings.DATA_DIR / SERVER_FILE, url)
        self.stdout.write(
            f"Gryvia serves on {url}: the gryvia CLI finds it from {advertised} (GRYVIA_DATA_DIR), "
            f"or pass --url {url} / export GRYVIA_URL={url}"
        )
        config = uvicorn.Config(
            application,
            host=host,
            port=port,
            lifespan="off",
            log_level="info",
            timeout_graceful_shutdown=10,
            # Forwarded headers only from GRYVIA_TRUSTED_PROXIES (uvicorn would trust any loopback peer's).
            proxy_headers=bool(settings.GRYVIA_TRUSTED_PROXIES),
            forwarded_allow_ips=settings.GRYVIA_TRUSTED_PROXIES or "",
        )
        # After Config, which installs uvicorn's logging: no credential in a query string reaches the log.
        for name in ("uvicorn.access", "uvicorn.error"):
            logging.getLogger(name).addFilter(AccessLogScrubber())
        # uvicorn re-raises the signal that stopped it once it has shut down; with the default SIGTERM action that
        # would end this process before the cleanup below. Quiet handlers let the cleanup run first.
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGINT, lambda *_: None)
        try:
            uvicorn.Server(config).run()
        finally:
            withdraw(advertised)
            if ticker is not None:
                ticker.stop()
            for hook in serve_stop_hooks():
                hook()
            set_backend(None)
            self.stdout.write("Gryvia stopped")


SERVER_FILE = "server.json"  # the name gryvia_cli.config reads


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses: a wildcard bind is reached at loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def advertise(path: Path, url: str) -> Path:
    """Write {"url", "pid"} whole (a rename), readable by all: it holds no secret."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}) + "\n")
    os.replace(tmp, path)
    return path


def withdraw(path: Path) -> None:
    """Remove the file if it is still this process's (another server may have started on the data dir since)."""
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
