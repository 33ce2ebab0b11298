"""The webhooks app's periodic work (apps.core.periodic): the embedded ticker and Celery beat run it."""

from apps.core.periodic import register

from .delivery import deliver_webhooks
from .outbox import DRAIN

register(DRAIN, deliver_webhooks, every=2.0)
