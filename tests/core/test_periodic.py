"""Periodic work is registered by each app's tasks.py (apps.core.periodic); beat and the ticker read that registry."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from apps.core import periodic
from apps.core.beat import LeaderScheduler
from gryvia_site.celery import app as celery_app

# Every app's periodic work: its app, function and interval in seconds (as GRYVIA_PERIODIC listed them before).
EXPECTED = {
    "reconcile-tenants": ("tenants", "reconcile_tenants", 20.0),
    "reconcile-jobs": ("jobs", "reconcile_jobs", 2.0),
    "reconcile-priority-classes": ("queueing", "reconcile_priority_classes", 30.0),
    "reconcile-admission-objects": ("queueing", "reconcile_admission_objects", 30.0),
    "reconcile-reservations": ("queueing", "reconcile_reservations", 30.0),
    "reconcile-inference-services": ("llm", "reconcile_inference_services", 5.0),
    "deliver-webhooks": ("webhooks", "deliver_webhooks", 2.0),
    "refresh-usage": ("billing", "refresh_usage", 60.0),
    "evaluate-budgets": ("billing", "evaluate_budgets", 60.0),
    "settle-llm-reservations": ("llm", "settle_dead_replicas", 5.0),
}


def test_the_registry_holds_every_apps_periodic_work_at_its_interval():
    registered = {task.name: task for task in periodic.registry}
    assert set(registered) == set(EXPECTED)
    for name, (app, function, every) in EXPECTED.items():
        task = registered[name]
        assert task.every == every, name
        assert task.function.__module__.startswith(f"apps.{app}.") and task.function.__name__ == function, task.path


def test_beats_schedule_is_built_from_the_registry(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # the lease's client; nothing connects while the schedule is set up
    scheduler = LeaderScheduler(app=celery_app)
    assert set(scheduler.schedule) == set(EXPECTED)
    for name, (_app, _function, every) in EXPECTED.items():
        entry = scheduler.schedule[name]
        assert entry.task == "apps.core.tasks.run_periodic" and entry.args == (name,)
        assert entry.schedule.run_every == timedelta(seconds=every)
        assert entry.options["expires"] == max(every - 1.0, 1.0)
    assert celery_app.tasks["apps.core.tasks.run_periodic"].name == periodic.RUN_PERIODIC_TASK


def test_an_unknown_name_is_a_clear_error():
    with pytest.raises(
        periodic.UnknownPeriodicTask, match="no periodic task named 'reconcile-nothing'.*reconcile-jobs"
    ):
        periodic.nudge("reconcile-nothing")
    with pytest.raises(periodic.UnknownPeriodicTask):
        periodic.run_periodic("reconcile-nothing")


def test_a_name_registered_twice_for_different_work_is_refused():
    registry = periodic.PeriodicRegistry()

    @registry("tidy", every=10.0)
    def tidy() -> None:
        """Stands for an app's periodic function."""

    registry.register("tidy", tidy, every=10.0)  # its tasks module imported again
    with pytest.raises(ValueError, match="already registered"):
        registry.register("tidy", tidy, every=20.0)
    with pytest.raises(ValueError, match="must be positive"):
        registry.register("other", tidy, every=0)
    assert [task.name for task in registry] == ["tidy"] and "tidy" in registry


def test_the_ticker_runs_its_tasks_and_ignores_a_wake_for_one_it_does_not_run():
    ran: list[str] = []
    ticker = periodic.Ticker([periodic.PeriodicTask(name="count", function=lambda: ran.append("count"), every=3600)])
    ticker.wake("reconcile-jobs")  # not this ticker's: it must not stay due and keep the ticker spinning
    assert set(ticker._due) == {"count"}
    ticker.start()
    try:
        _wait_for(lambda: ran == ["count"])  # the first pass, at start
        ticker.wake("count")
        _wait_for(lambda: len(ran) == 2)
    finally:
        ticker.stop()
    assert ran == ["count", "count"]  # an hour early: only the wake made it run again


def _wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
