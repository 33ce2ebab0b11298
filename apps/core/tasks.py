"""Celery tasks of the production profile: thin wrappers that call the same functions as the embedded ticker."""

from celery import shared_task

from . import periodic


@shared_task(ignore_result=True, name="apps.core.tasks.run_periodic")
def run_periodic(name: str) -> None:
    periodic.run_periodic(name)
