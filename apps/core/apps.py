from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # drf-spectacular finds its extensions by import (its documented way to register them).
        from django.conf import settings
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_delete, post_migrate
        from django.utils.module_loading import autodiscover_modules

        from . import liveauth
        from .api import schema  # noqa: F401
        from .db import (
            epochs,
            pgtime,
            prepared,  # noqa: F401  (registers the `any_of` lookup on every field)
        )

        # Timestamps parsed by psycopg's C loader rather than Django's pure-Python one (apps.core.db.pgtime).
        connection_created.connect(pgtime.install, dispatch_uid="gryvia-fast-timestamptz")
        # The table epochs' triggers, after every migrate (apps.core.db.epochs).
        post_migrate.connect(epochs.on_post_migrate, dispatch_uid="gryvia-table-epochs")
        # A deleted OAuth access token (revoked, refreshed, deleted in the admin) closes the sockets it opened: the
        # toolkit sends no signal of its own for that (apps.core.liveauth).
        post_delete.connect(
            liveauth.on_access_token_deleted,
            sender=settings.OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL,
            dispatch_uid="gryvia-live-token-deleted",
        )
        # Each app's tasks.py registers its periodic work (apps.core.periodic) and Celery tasks when imported.
        autodiscover_modules("tasks")
