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
