from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import ApiKeyViewSet, MembershipViewSet, TenantViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("api-keys", ApiKeyViewSet, basename="api-key")

members_list = MembershipViewSet.as_view({"get": "list", "post": "create"})
members_detail = MembershipViewSet.as_view(
    {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}
)

urlpatterns = [
    *router.urls,
    path("tenants/<slug:tenant_slug>/members/", members_list, name="tenant-member-list"),
    path("tenants/<slug:tenant_slug>/members/<str:username>/", members_detail, name="tenant-member-detail"),
]
