"""Celery (production profile). Periodic work is registered by the apps (apps.core.periodic), not listed here."""

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
# No beat schedule here: each app's tasks.py registers its periodic work (apps.core.periodic), and the scheduler
# above builds its entries from that registry.
