"""ASGI entry point: HTTP goes to Django, websockets to Channels consumers (authenticated, origin-checked)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gryvia_site.settings.base")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.core.ws import CredentialAuthMiddleware  # noqa: E402
from gryvia_site.ws_routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(CredentialAuthMiddleware(URLRouter(websocket_urlpatterns))),
    }
)
