"""Periodic work, one table for both profiles (settings.GRYVIA_PERIODIC).

Production: Celery beat sends `apps.core.tasks.run_periodic(name)` to workers. Embedded profile: `Ticker`, a
thread in the server process, calls the same functions. Services `nudge(name)` after a commit so the change is
pushed at once rather than at the next tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)

_ticker: Ticker | None = None


def periodic_function(name: str) -> Callable[[], Any]:
    path, _interval = settings.GRYVIA_PERIODIC[name]
    return import_string(path)


def run_periodic(name: str) -> Any:
    return periodic_function(name)()


def nudge(name: str) -> None:
    """Ask for `name` to run soon after the current transaction commits."""

    def _go() -> None:
        if _ticker is not None:
            _ticker.wake(name)
        elif settings.REDIS_URL:
            from .tasks import run_periodic as task

            try:
                task.delay(name)
            except Exception:  # the schedule will pick it up; a nudge is only a shortcut
                logger.warning("could not queue %s; the next scheduled pass will run it", name)

    transaction.on_commit(_go)


class Ticker:
    """Runs every periodic function at its interval (and at once when woken) on one background thread."""

    def __init__(self, table: dict[str, tuple[str, float]] | None = None) -> None:
        self.table = dict(table if table is not None else settings.GRYVIA_PERIODIC)
        self._due = {name: 0.0 for name in self.table}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gryvia-ticker", daemon=True)

    def start(self) -> None:
        global _ticker
        _ticker = self
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        global _ticker
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        _ticker = None

    def wake(self, name: str) -> None:
        self._due[name] = 0.0
        self._wake.set()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            connections.close_all()

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for name, (path, interval) in self.table.items():
                if self._stop.is_set() or self._due[name] > now:
                    continue
                self._due[name] = now + interval
                close_old_connections()
                try:
                    import_string(path)()
                except Exception:
                    logger.exception("periodic %s failed", name)
                finally:
                    close_old_connections()
            wait = max(0.05, min(self._due.values()) - time.monotonic()) if self._due else 1.0
            self._wake.wait(wait)
            self._wake.clear()
