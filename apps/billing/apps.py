from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.core import events
        from apps.queueing.services import reservation_hooks

        from . import checks  # noqa: F401  (registers the system checks)
        from .services import usage_reservation_deleted, usage_reservations_sync

        # Queueing is below billing: it calls billing back through its hooks when reservations change.
        reservation_hooks.on_reservation_claims_written(usage_reservations_sync)
        reservation_hooks.on_reservation_deleting(usage_reservation_deleted)
        # The kind of live events this app emits (apps.core.events).
        events.register_kind("budget", read_scope="billing:read")
