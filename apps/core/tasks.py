"""Celery tasks of the production profile: thin wrappers that call the same functions as the embedded ticker.

`run_periodic(name)` is the one task Celery beat sends (apps.core.periodic's registry names what it runs). Core
registers no periodic work of its own; each app's tasks.py registers its own.
"""

from celery import shared_task

from . import periodic


@shared_task(ignore_result=True, name=periodic.RUN_PERIODIC_TASK)
def run_periodic(name: str) -> None:
    periodic.run_periodic(name)
