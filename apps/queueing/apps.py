from django.apps import AppConfig


class QueueingConfig(AppConfig):
    name = "apps.queueing"
    label = "queueing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.core import events

        # The kinds of live events this app emits (apps.core.events).
        events.register_kind("queue", read_scope="queues:read")
        events.register_kind("reservation", read_scope="queues:read")
