from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.core import events, identity, lifecycle

        from . import demo
        from .selectors import api_key_visible
        from .services.identity import TenantsIdentity

        # apps.core checks credentials and finds tenants through this provider: it may not import this app.
        identity.register(TenantsIdentity())
        # `manage.py bootstrap` (apps.core.lifecycle): the demo tenant after the other apps' steps, and its key's flags.
        lifecycle.register_bootstrap_step("demo-tenant", demo.demo_set_up, order=20)
        lifecycle.register_bootstrap_action(
            "print-demo-key", demo.demo_key_print, help_text="print the demo API key alone, and stop"
        )
        lifecycle.register_bootstrap_action(
            "rotate-demo-key", demo.demo_key_rotate, help_text="replace the demo API key: print and store a new one"
        )
        # The kinds of live events this app emits (apps.core.events; a client may subscribe to one API key).
        events.register_kind("tenant", read_scope=None)
        events.register_kind("membership", read_scope=None)
        events.register_kind("api_key", read_scope="keys:read", visible=api_key_visible)
