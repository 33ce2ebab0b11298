"""Which cluster backend runs workloads: `local` (processes on this machine) or `kubernetes`."""

from django.core.exceptions import ImproperlyConfigured

from ..env import env_int, env_str

GRYVIA_BACKEND = env_str("GRYVIA_BACKEND", "local")
if GRYVIA_BACKEND not in {"local", "kubernetes"}:
    raise ImproperlyConfigured(f"GRYVIA_BACKEND must be 'local' or 'kubernetes', got {GRYVIA_BACKEND!r}")

GRYVIA_KUBE_QPS = float(env_str("GRYVIA_KUBE_QPS", "20"))
GRYVIA_KUBE_BURST = env_int("GRYVIA_KUBE_BURST", 30)
GRYVIA_KUBE_TIMEOUT_S = float(env_str("GRYVIA_KUBE_TIMEOUT_S", "10"))
# Reconcile passes are bounded by count and by time.
GRYVIA_RECONCILE_MAX_PER_PASS = env_int("GRYVIA_RECONCILE_MAX_PER_PASS", 500)
GRYVIA_RECONCILE_BUDGET_S = float(env_str("GRYVIA_RECONCILE_BUDGET_S", "15"))
# How long a finished job keeps its workload (and pod logs), Service and PVC when its spec sets no
# ttlSecondsAfterFinished.
GRYVIA_JOB_TTL_S = env_int("GRYVIA_JOB_TTL_S", 7 * 86400)
# Who admits jobs: Gryvia's own queues (`native`), or a cluster's Kueue or KAI scheduler, fed from Gryvia's queues.
GRYVIA_ADMISSION = env_str("GRYVIA_ADMISSION", "native")
if GRYVIA_ADMISSION not in {"native", "kueue", "kai"}:
    raise ImproperlyConfigured(f"GRYVIA_ADMISSION must be native, kueue or kai, got {GRYVIA_ADMISSION!r}")
