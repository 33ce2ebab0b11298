from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

from ..env import BASE_DIR, data_dir, env_bool, env_int, env_list, env_str, secret_from_env_or_file

GRYVIA_ENV = env_str("GRYVIA_ENV", "development")
PRODUCTION = GRYVIA_ENV == "production"
DATA_DIR = data_dir()

SECRET_KEY = secret_from_env_or_file("SECRET_KEY", "secret_key", production=PRODUCTION)
# The pepper for API key digests: a leaked database alone cannot be used to test guessed keys.
GRYVIA_API_KEY_PEPPER = secret_from_env_or_file("GRYVIA_API_KEY_PEPPER", "api_key_pepper", production=PRODUCTION)
# Secrets stored to be used again (upstream API keys) are encrypted with a key derived from this (apps.core.crypto);
# keys listed in GRYVIA_ENCRYPTION_KEYS_PREVIOUS still decrypt after a rotation.
# Any 50+ character random string, or a Fernet.generate_key() value: it is the input of HKDF, not the Fernet key.
GRYVIA_ENCRYPTION_KEY = secret_from_env_or_file(
    "GRYVIA_ENCRYPTION_KEY", "encryption_key", production=PRODUCTION, fernet_key_ok=True
)
GRYVIA_ENCRYPTION_KEYS_PREVIOUS = env_list("GRYVIA_ENCRYPTION_KEYS_PREVIOUS", [])

DEBUG = env_bool("GRYVIA_DEBUG", not PRODUCTION)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
GRYVIA_PORT = env_int("GRYVIA_PORT", 8000)
# Long-running processes (the Celery worker, `serve`): the cyclic collector's young-generation threshold once started
# (apps.core.db.heap). 0 keeps Python's own (700).
GRYVIA_GC_YOUNG_THRESHOLD = env_int("GRYVIA_GC_YOUNG_THRESHOLD", 50_000)
if GRYVIA_GC_YOUNG_THRESHOLD < 0:
    raise ImproperlyConfigured(f"GRYVIA_GC_YOUNG_THRESHOLD must be 0 or more, got {GRYVIA_GC_YOUNG_THRESHOLD}")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "oauth2_provider",
    "channels",
    "axes",
    "django_htmx",  # ships htmx-2.min.js as a static file: the dashboard's htmx, no CDN
    "apps.core",
    "apps.tenants",
    "apps.cluster",
    "apps.jobs",
    "apps.queueing",
    "apps.billing",
    "apps.llm",
    "apps.webhooks",
    "apps.dashboard",
]

MIDDLEWARE = [
    "apps.core.metrics.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "apps.core.security.QueryCredentialMiddleware",
    "apps.core.security.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.core.api.throttling.RateLimitHeadersMiddleware",
    # Last, as django-axes requires: it turns a login refused for a lockout into its lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "gryvia_site.urls"
ASGI_APPLICATION = "gryvia_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Password logins (/admin/login/, /accounts/login/, which OAuth's /o/authorize/ sends people to) are refused while
# the username or the client address has GRYVIA_LOGIN_FAILURE_LIMIT failures within GRYVIA_LOGIN_COOLOFF_S
# (django-axes, its attempts in the database: both profiles, shown in the admin, released by `axes_reset*`).
AUTHENTICATION_BACKENDS = [
    "apps.core.logins.LoginLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("GRYVIA_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("GRYVIA_LOGIN_COOLOFF_S", 900))
if AXES_FAILURE_LIMIT < 1 or AXES_COOLOFF_TIME.total_seconds() < 1:
    raise ImproperlyConfigured("GRYVIA_LOGIN_FAILURE_LIMIT and GRYVIA_LOGIN_COOLOFF_S must be 1 or more")
# Either one locks: a guesser cannot spread tries over many usernames from one address, nor over many addresses
# against one username.
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
# The client address is REMOTE_ADDR (axes without django-ipware): X-Forwarded-For is a client's to forge.
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False  # no banner on every manage.py command's stderr

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# Production serves /static/ from its ingress or a CDN after collectstatic; set to 0 there if you do.
GRYVIA_SERVE_STATIC = env_bool("GRYVIA_SERVE_STATIC", True)
if GRYVIA_SERVE_STATIC:
    # WhiteNoise serves /static/ (the admin's and the dashboard's files) from the app itself with cache headers;
    # from the apps' static folders directly (finders), so `make run` needs no collectstatic.
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
        "whitenoise.middleware.WhiteNoiseMiddleware",
    )
    WHITENOISE_USE_FINDERS = True
    STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise also serves collectstatic's output, and warns when it is missing
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/accounts/login/"

# Largest request body Django will read (JSON and YAML manifests are small).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("GRYVIA_MAX_BODY_BYTES", 1024 * 1024)

if PRODUCTION:
    SESSION_COOKIE_SECURE = env_bool("GRYVIA_SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# HTTPS. The header is sent only on answers to HTTPS requests, so a year's HSTS is the production default even where
# TLS ends at a proxy (it then needs GRYVIA_TRUST_X_FORWARDED_PROTO for Django to know the request was HTTPS).
SECURE_HSTS_SECONDS = env_int("GRYVIA_HSTS_SECONDS", 31_536_000 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("GRYVIA_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("GRYVIA_HSTS_PRELOAD", False)
# Off by default: TLS usually ends at the ingress, which redirects http itself, and in-cluster callers (job pods
# reporting to GRYVIA_INTERNAL_API_URL, kubelet probes) reach the Service over plain http. Set it where Gryvia
# faces clients directly.
SECURE_SSL_REDIRECT = env_bool("GRYVIA_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz|metrics)$"]
if env_bool("GRYVIA_TRUST_X_FORWARDED_PROTO", False):  # only behind a proxy that sets it: clients could forge it
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The proxies whose X-Forwarded-For and X-Forwarded-Proto the server believes (addresses or CIDRs, comma-separated;
# `serve` hands them to uvicorn). None by default: a client, on loopback too, cannot choose the address that login
# lockouts and the uncredentialed throttle count by.
GRYVIA_TRUSTED_PROXIES = env_list("GRYVIA_TRUSTED_PROXIES")
# `manage.py check --deploy` (run by `make test` on the production profile) silences only these, each for a reason:
SILENCED_SYSTEM_CHECKS = [
    # W005/W021: HSTS over subdomains or in browsers' preload lists binds the operator's whole domain, not Gryvia;
    # GRYVIA_HSTS_INCLUDE_SUBDOMAINS=1 / GRYVIA_HSTS_PRELOAD=1 opt in.
    "security.W005",
    "security.W021",
    # W008: see SECURE_SSL_REDIRECT above (GRYVIA_SSL_REDIRECT=1 where no proxy redirects).
    "security.W008",
    # W008 of django-oauth-toolkit: `http` redirect URIs are kept for RFC 8252 loopback redirects of native clients
    # (the gryvia CLI); apps.tenants.oauth refuses http to any other host.
    "oauth2_provider.W008",
]

# Content-Security-Policy of every HTML page (apps.core.security): scripts only from this origin (no inline
# script, no eval), nothing framed or framing, no plugins. Inline styles stay allowed: the login page, invoices
# and Swagger UI carry <style> blocks, and a style cannot run code. No form-action: the OAuth consent form's answer
# redirects to the client's own redirect URI, which browsers would check against it.
GRYVIA_CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)
