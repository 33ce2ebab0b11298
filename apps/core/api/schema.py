"""drf-spectacular extensions: how Gryvia's authentication classes appear in the OpenAPI schema."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "apps.core.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API key: gry_<key_id>_<secret>"}


class OAuthScheme(OpenApiAuthenticationExtension):
    target_class = "apps.core.api.authentication.OAuthTokenAuthentication"
    name = "oauth2"

    def get_security_definition(self, auto_schema):
        return {
            "type": "oauth2",
            "flows": {
                "authorizationCode": {
                    "authorizationUrl": "/o/authorize/",
                    "tokenUrl": "/o/token/",
                    "scopes": {"read": "Read your tenants' objects", "write": "Change them, as your role allows"},
                }
            },
        }


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "apps.core.api.authentication.CsrfSessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}
