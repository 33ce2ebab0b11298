from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import GpuSkuViewSet, LedgerVerifyView, UsageEventsView, UsageRecordViewSet, UsageView

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("skus", GpuSkuViewSet, basename="gpu-sku")
router.register("usage/records", UsageRecordViewSet, basename="usage-record")
urlpatterns = [
    path("usage/", UsageView.as_view(), name="usage"),
    path("usage/events/", UsageEventsView.as_view(), name="usage-events"),
    *router.urls,
    path("ledger/<slug:tenant>/verify/", LedgerVerifyView.as_view(), name="ledger-verify"),
]
