from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # drf-spectacular finds its extensions by import (its documented way to register them).
        from .api import schema  # noqa: F401
