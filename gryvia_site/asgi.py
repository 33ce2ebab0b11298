"""ASGI entry point: HTTP goes to Django (/v1/ to the LLM gateway's own handler), websockets to Channels consumers
(origin-checked: scheme, host and port; then authenticated, apps.core.ws)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gryvia_site.settings.base")
# /static/ is served by WhiteNoise's middleware inside Django (GRYVIA_SERVE_STATIC, settings/components/core.py).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from apps.core.ws import CredentialMiddleware, OriginValidator  # noqa: E402
from apps.llm.gateway.handler import GatewayHandler, is_gateway_path  # noqa: E402
from gryvia_site.ws_routing import websocket_urlpatterns  # noqa: E402

gateway_app = GatewayHandler()


async def http_app(scope, receive, send):
    """/v1/ (the OpenAI-compatible gateway) goes to its own lean handler; everything else to the site."""
    if is_gateway_path(scope["path"]):
        await gateway_app(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": OriginValidator(CredentialMiddleware(URLRouter(websocket_urlpatterns))),
    }
)
