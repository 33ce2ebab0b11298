from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "apps.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        from apps.core import events

        from . import outbox

        # apps.core.events.emit writes events for outside receivers to this app's outbox.
        events.register_outbox(outbox)
        # The kinds of live events this app emits (apps.core.events).
        events.register_kind("webhook_endpoint", read_scope="webhooks:read")
        events.register_kind("webhook_delivery", read_scope="webhooks:read")
