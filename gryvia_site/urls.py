from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apps.core import views as core_views

api_v1 = [
    path("", include("apps.core.api.urls")),
    path("", include("apps.tenants.api.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("schema/ui/", SpectacularSwaggerView.as_view(url_name="schema"), name="schema-ui"),
]

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", core_views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("api/v1/", include(api_v1)),
]
