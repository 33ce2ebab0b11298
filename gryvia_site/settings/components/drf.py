from ..env import env_str

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.core.api.authentication.ApiKeyAuthentication",
        "apps.core.api.authentication.OAuthTokenAuthentication",
        "apps.core.api.authentication.CsrfSessionAuthentication",
        "apps.core.api.authentication.NoCredential",  # last: counts requests that presented none of the above
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.core.api.permissions.ScopedAccess"],
    "DEFAULT_PARSER_CLASSES": [
        "apps.core.api.parsers.JSONParser",
        "apps.core.api.parsers.YAMLParser",
        "apps.core.api.parsers.XYAMLParser",
        "apps.core.api.parsers.TextYAMLParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    # OPTIONS answers in JSON whatever format was asked for (CSV and HTML renderers draw only their view's payload).
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "apps.core.api.renderers.ApiContentNegotiation",
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.pagination.OrderedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_THROTTLE_CLASSES": ["apps.core.api.throttling.CredentialRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "credential": env_str("GRYVIA_API_RATE", "1200/min"),
        # Requests with no or a bad credential, per client address: bounds how many keys one address can guess.
        "anon": env_str("GRYVIA_API_ANON_RATE", "60/min"),
    },
    # The client address of the per-address limits is REMOTE_ADDR: X-Forwarded-For is a client's to forge.
    "NUM_PROXIES": 0,
    "EXCEPTION_HANDLER": "apps.core.api.exceptions.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Gryvia API",
    "DESCRIPTION": "Control plane for multi-tenant GPU clusters.",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # Tenant-owned models keep a fail-closed `objects`; schema generation reads the unscoped manager.
    "DEFAULT_QUERY_MANAGER": "_default_manager",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # The credentials a client can present (NoCredential, last in the list, is none).
    "AUTHENTICATION_WHITELIST": [
        "apps.core.api.authentication.ApiKeyAuthentication",
        "apps.core.api.authentication.OAuthTokenAuthentication",
        "apps.core.api.authentication.CsrfSessionAuthentication",
    ],
    # Swagger UI and ReDoc from the installed drf-spectacular-sidecar, served as static files: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Swagger UI would otherwise send the schema to validator.swagger.io for its badge.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}
