"""The Celery app of the production profile (REDIS_URL set): `make worker` and `make beat`."""

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init, worker_shutdown

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
    """Each worker process, once started: full collections stop walking what it keeps for life (apps.core.db.heap)."""
    from apps.core.db.heap import freeze_startup_heap

    freeze_startup_heap()


@worker_init.connect
def _run_the_local_node(**_kwargs) -> None:
    """With the local backend this worker runs the installation's workloads (threads pool: one process), or, when
    another process already does, refuses to start with that one's pid (apps/cluster/backends/local/node.py)."""
    from apps.cluster.backends import claim_local_node
    from apps.cluster.services import NodeBusyError

    try:
        claim_local_node()
    except NodeBusyError as exc:
        raise SystemExit(f"gryvia worker: {exc}") from None


@worker_shutdown.connect
def _stop_the_local_node(**_kwargs) -> None:
    """A worker stopping stops what it runs (checkpoint request, grace, then SIGTERM), so nothing outlives it; the
    job reconciler runs those jobs again from their checkpoints once a worker is back."""
    from apps.cluster.backends import set_backend

    set_backend(None)
