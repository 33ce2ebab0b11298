"""Celery (production profile). The same periodic table drives the embedded ticker when REDIS_URL is unset."""

from ..env import env_str
from .cluster import GRYVIA_BACKEND
from .redis import REDIS_URL

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
# The local backend runs workloads as children of one process per installation (its node, see
# apps/cluster/backends/local/node.py): a worker on it runs its tasks in threads of that one process.
CELERY_WORKER_POOL = "threads" if GRYVIA_BACKEND == "local" else "prefork"
# Beat sends only while it holds a leader lease in Redis (apps.core.beat), so a second beat is a hot standby. The
# lease is renewed every third of its TTL; a standby takes over at once from a leader stopped cleanly, and within
# the TTL (plus a poll of at most 1 s) from one killed.
CELERY_BEAT_SCHEDULER = "apps.core.beat:LeaderScheduler"
GRYVIA_BEAT_LOCK_TTL_S = float(env_str("GRYVIA_BEAT_LOCK_TTL_S", "5"))

# name -> (dotted path of a plain function, interval in seconds). Celery beat runs each through
# apps.core.tasks.run_periodic; the embedded ticker calls the function directly.
GRYVIA_PERIODIC = {
    "reconcile-tenants": ("apps.tenants.reconciler.reconcile_tenants", 20.0),
    "reconcile-jobs": ("apps.jobs.reconciler.reconcile_jobs", 2.0),
    "reconcile-priority-classes": ("apps.queueing.reconciler.reconcile_priority_classes", 30.0),
    "reconcile-admission-objects": ("apps.queueing.admission_objects.reconcile_admission_objects", 30.0),
    "reconcile-reservations": ("apps.queueing.reservations.reconcile_reservations", 30.0),
    "reconcile-inference-services": ("apps.llm.reconciler.reconcile_inference_services", 5.0),
    "deliver-webhooks": ("apps.webhooks.delivery.deliver_webhooks", 2.0),
    "refresh-usage": ("apps.billing.tasks.refresh_usage", 60.0),
    "evaluate-budgets": ("apps.billing.tasks.evaluate_budgets", 60.0),
    "settle-llm-reservations": ("apps.llm.gateway.recovery.settle_dead_replicas", 5.0),
}

CELERY_BEAT_SCHEDULE = {
    name: {
        "task": "apps.core.tasks.run_periodic",
        "schedule": interval,
        "args": (name,),
        # A run queued behind a busy worker expires instead of piling up (AWX's beat 'expires').
        "options": {"expires": max(interval - 1.0, 1.0)},
    }
    for name, (_path, interval) in GRYVIA_PERIODIC.items()
}
