"""Periodic work, one registry for both profiles.

Each app's `tasks.py` registers its periodic functions here (`register(name, function, every=...)`, or the
`@periodic(name, every=...)` decorator); core's AppConfig.ready() imports every app's `tasks` module, so the registry
is full once Django is set up. Production: Celery beat (apps.core.beat.LeaderScheduler) builds its schedule from the
registry and sends `apps.core.tasks.run_periodic(name)` to workers. Embedded profile: `Ticker`, a thread in the
server process, calls the same functions. Services `nudge(name)` after a commit so the change is pushed at once
rather than at the next tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import close_old_connections, connections, transaction

logger = logging.getLogger(__name__)

# The one Celery task beat sends (apps.core.tasks); named here so that a nudge can queue it without importing it.
RUN_PERIODIC_TASK = "apps.core.tasks.run_periodic"

_ticker: Ticker | None = None


class UnknownPeriodicTask(LookupError):
    """A name no app's tasks.py registered."""


@dataclass(frozen=True)
class PeriodicTask:
    """A plain function run every `every` seconds (and soon after a nudge) by the ticker or Celery beat."""

    name: str
    function: Callable[..., Any]
    every: float

    @property
    def path(self) -> str:
        return f"{self.function.__module__}.{self.function.__qualname__}"


class PeriodicRegistry:
    """name -> periodic task, filled by the apps' tasks.py modules at startup."""

    def __init__(self) -> None:
        self._tasks: dict[str, PeriodicTask] = {}

    def register(self, name: str, function: Callable[..., Any], *, every: float) -> Callable[..., Any]:
        """Run `function` every `every` seconds under `name`; returns the function (so it serves as a decorator)."""
        if every <= 0:
            raise ValueError(f"periodic task {name!r}: the interval must be positive, not {every!r}")
        task = PeriodicTask(name=name, function=function, every=float(every))
        known = self._tasks.get(name)
        # The same function registered again (its tasks module imported twice) is no conflict.
        if known is not None and (known.path, known.every) != (task.path, task.every):
            raise ValueError(f"periodic task {name!r} is already registered as {known.path} every {known.every:g} s")
        self._tasks[name] = task
        return function

    def __call__(self, name: str, *, every: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """`@periodic("name", every=seconds)` over a plain function."""

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            return self.register(name, function, every=every)

        return decorate

    def get(self, name: str) -> PeriodicTask:
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownPeriodicTask(
                f"no periodic task named {name!r}; registered: {', '.join(sorted(self._tasks)) or 'none'} "
                "(each app registers its own in its tasks.py)"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[PeriodicTask]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def beat_schedule(self) -> dict[str, dict[str, Any]]:
        """Celery beat's entries: each task sent as `run_periodic(name)` at its interval."""
        return {
            task.name: {
                "task": RUN_PERIODIC_TASK,
                "schedule": task.every,
                "args": (task.name,),
                # A run queued behind a busy worker expires instead of piling up (AWX's beat 'expires').
                "options": {"expires": max(task.every - 1.0, 1.0)},
            }
            for task in self
        }


registry = PeriodicRegistry()
register = registry.register
periodic = registry


def run_periodic(name: str, *args: Any) -> Any:
    """Run the periodic task `name` now, in this process."""
    return registry.get(name).function(*args)


def nudge(name: str) -> None:
    """Ask for `name` to run soon after the current transaction commits."""
    registry.get(name)  # an unknown name fails here, in the caller, rather than in an on-commit callback

    def _go() -> None:
        if _ticker is not None:
            _ticker.wake(name)
        elif settings.REDIS_URL:
            try:
                current_app.send_task(RUN_PERIODIC_TASK, args=(name,))
            except Exception:  # the schedule will pick it up; a nudge is only a shortcut
                logger.warning("could not queue %s; the next scheduled pass will run it", name)

    transaction.on_commit(_go)


class Ticker:
    """Runs every periodic function at its interval (and at once when woken) on one background thread."""

    def __init__(self, tasks: Iterable[PeriodicTask] | None = None) -> None:
        self.tasks = {task.name: task for task in (tasks if tasks is not None else registry)}
        self._due = {name: 0.0 for name in self.tasks}
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
        # A name this ticker does not run would stay due forever and keep it waking.
        if name in self._due:
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
            for name, task in self.tasks.items():
                if self._stop.is_set() or self._due[name] > now:
                    continue
                self._due[name] = now + task.every
                close_old_connections()
                try:
                    task.function()
                except Exception:
                    logger.exception("periodic %s failed", name)
                finally:
                    close_old_connections()
            wait = max(0.05, min(self._due.values()) - time.monotonic()) if self._due else 1.0
            self._wake.wait(wait)
            self._wake.clear()
