from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # drf-spectacular finds its extensions by import (its documented way to register them).
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from . import (
            epochs,
            pgtime,
            prepared,  # noqa: F401  (registers the `any_of` lookup on every field)
        )
        from .api import schema  # noqa: F401

        # Timestamps parsed by psycopg's C loader rather than Django's pure-Python one (apps.core.pgtime).
        connection_created.connect(pgtime.install, dispatch_uid="gryvia-fast-timestamptz")
        # The table epochs' triggers, after every migrate (apps.core.epochs).
        post_migrate.connect(epochs.on_post_migrate, dispatch_uid="gryvia-table-epochs")
