from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.core import views as core_views
from apps.core.admin_site import favicon

api_v1 = [
    path("", include("apps.core.api.urls")),
    path("", include("apps.tenants.api.urls")),
    path("", include("apps.jobs.api.urls")),
    path("", include("apps.queueing.api.urls")),
    path("", include("apps.llm.api.urls")),
    path("", include("apps.billing.api.urls")),
    path("", include("apps.webhooks.api.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file: the page runs under a CSP without inline scripts.
    path("schema/ui/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="schema-ui"),
]

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", core_views.metrics, name="metrics"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    # Any member signs in here (the admin login takes staff only), e.g. to approve an OAuth client.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    # Single sign-on for people (Gryvia as the provider's client), only when configured (components/oidc.py).
    *([path("oidc/", include("apps.tenants.sso.urls"))] if settings.GRYVIA_OIDC_ENABLED else []),
    path("api/v1/", include(api_v1)),
    # Last: any other path under /api/ is a 404 in the API's error format, DEBUG or not.
    re_path(r"^api/(?P<path>.*)$", core_views.api_not_found, name="api-not-found"),
    # The browser dashboard: /, /login/, /jobs/ ... (apps/dashboard, docs/dashboard.md).
    path("", include("apps.dashboard.urls")),
]
