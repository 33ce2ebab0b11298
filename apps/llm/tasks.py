"""The llm app's periodic work (apps.core.periodic): the embedded ticker and Celery beat run it."""

from apps.core.periodic import register

from .gateway.recovery import settle_dead_replicas
from .reconciler import RECONCILE, reconcile_inference_services

register(RECONCILE, reconcile_inference_services, every=5.0)
# The token reservations of gateway processes that died without settling them.
register("settle-llm-reservations", settle_dead_replicas, every=5.0)
