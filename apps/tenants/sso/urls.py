"""/oidc/: mounted by gryvia_site.urls only when single sign-on is configured."""

from django.urls import path

from .views import SSOAuthenticateView, SSOCallbackView, SSOLogoutView, no_tenant

urlpatterns = [
    path("authenticate/", SSOAuthenticateView.as_view(), name="oidc_authentication_init"),
    path("callback/", SSOCallbackView.as_view(), name="oidc_authentication_callback"),
    # POST only (mozilla-django-oidc's default), so a cross-site link or image cannot sign anyone out.
    path("logout/", SSOLogoutView.as_view(), name="oidc_logout"),
    path("no-tenant/", no_tenant, name="oidc_no_tenant"),
]
