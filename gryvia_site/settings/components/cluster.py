"""Which cluster backend runs workloads (`local`: processes on this machine, or `kubernetes`), and who admits jobs
(Gryvia, Kueue with optional MultiKueue, or KAI)."""

import re

from django.core.exceptions import ImproperlyConfigured

from ..env import env_int, env_list, env_str

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_MAX_MULTIKUEUE_CLUSTERS = 10  # MultiKueueConfig.spec.clusters maxItems (Kueue v1beta1)

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
# Native admission reads the first N waiting jobs of each queue per cycle (the rest wait behind them).
GRYVIA_ADMISSION_HEADS = env_int("GRYVIA_ADMISSION_HEADS", 8)
if GRYVIA_ADMISSION_HEADS < 1:
    raise ImproperlyConfigured(f"GRYVIA_ADMISSION_HEADS must be at least 1, got {GRYVIA_ADMISSION_HEADS}")
# Kueue's namespace. With MultiKueue, Kueue reads each worker cluster's kubeconfig from the Secret
# `<cluster>-kubeconfig` (key `kubeconfig`) there; Gryvia never reads those Secrets.
GRYVIA_KUEUE_NAMESPACE = env_str("GRYVIA_KUEUE_NAMESPACE", "kueue-system")
if not _DNS_LABEL.match(GRYVIA_KUEUE_NAMESPACE):
    raise ImproperlyConfigured(
        f"GRYVIA_KUEUE_NAMESPACE must be a namespace name (a DNS label), got {GRYVIA_KUEUE_NAMESPACE!r}"
    )
# MultiKueue (kueue mode only): the worker clusters Kueue dispatches jobs to, comma-separated; empty: off.
GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS = env_list("GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS")
_bad_clusters = [name for name in GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS if not _DNS_LABEL.match(name)]
if _bad_clusters:
    raise ImproperlyConfigured(
        "GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS must be DNS labels (lowercase letters, digits and '-', at most 63 "
        f"characters), comma-separated; not valid: {', '.join(map(repr, _bad_clusters))}"
    )
_repeated = sorted({n for n in GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS if GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS.count(n) > 1})
if _repeated:
    raise ImproperlyConfigured(f"GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS names {', '.join(_repeated)} more than once")
if len(GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS) > _MAX_MULTIKUEUE_CLUSTERS:
    raise ImproperlyConfigured(
        f"GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS names {len(GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS)} clusters; Kueue's "
        f"MultiKueueConfig takes at most {_MAX_MULTIKUEUE_CLUSTERS}"
    )
if GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS and GRYVIA_ADMISSION != "kueue":
    raise ImproperlyConfigured(
        f"GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS is set but GRYVIA_ADMISSION is {GRYVIA_ADMISSION!r}: MultiKueue needs "
        "GRYVIA_ADMISSION=kueue (or leave GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS empty)"
    )
