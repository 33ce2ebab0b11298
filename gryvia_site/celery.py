"""The Celery app of the production profile (REDIS_URL set): `make worker` and `make beat`."""

import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gryvia_site.settings.base")

app = Celery("gryvia")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _add_worker_heartbeat() -> None:
    """Each worker refreshes its entry in Redis while it consumes, for /readyz (apps.core.heartbeats)."""
    from apps.core.heartbeats import WorkerHeartbeat

    app.steps["consumer"].add(WorkerHeartbeat)


_add_worker_heartbeat()


@worker_process_init.connect
def _freeze_startup_heap(**_kwargs) -> None:
    """Each worker process, once started: full collections stop walking what it keeps for life (apps.core.heap)."""
    from apps.core.heap import freeze_startup_heap

    freeze_startup_heap()
