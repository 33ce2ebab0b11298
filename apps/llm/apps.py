from django.apps import AppConfig


class LlmConfig(AppConfig):
    name = "apps.llm"
    label = "llm"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.core import lifecycle, security
        from apps.tenants.services import on_access_changed, register_key_limit_validator

        from . import local_registry, routing
        from .gateway.errors import credential_in_url_response
        from .gateway.meter import meter
        from .services import validate_key_limits

        # A key or tenant changed (apps.tenants): the gateway drops its cached keys and limits; a key's gateway
        # limits are checked here, where they are enforced.
        on_access_changed(routing.routes_changed)
        register_key_limit_validator(validate_key_limits)
        # Core's lifecycle (apps.core.lifecycle): bootstrap registers the packaged local models, /readyz waits for
        # them, and `serve` writes the gateway's last usage rows when it stops.
        lifecycle.register_bootstrap_step("local-models", local_registry.bootstrap_local_models, order=10)
        lifecycle.register_readiness_check("local-models", local_registry.local_models_readiness)
        lifecycle.register_serve_stop("llm-meter", meter.stop)
        # A credential in a /v1/ URL is refused in OpenAI's envelope (apps.core.security).
        security.register_refusal_renderer("/v1/", credential_in_url_response)
