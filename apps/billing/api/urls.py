from django.urls import path
from rest_framework.routers import DefaultRouter

from .budgets import BudgetViewSet, UsageForecastView
from .chargeback import ChargebackView, CostCenterViewSet
from .invoices import InvoiceViewSet
from .stripe import StripeWebhookView
from .views import GpuSkuViewSet, LedgerVerifyView, UsageEventsView, UsageRecordViewSet, UsageView

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("skus", GpuSkuViewSet, basename="gpu-sku")
router.register("usage/records", UsageRecordViewSet, basename="usage-record")
router.register("budgets", BudgetViewSet, basename="budget")
router.register("invoices", InvoiceViewSet, basename="invoice")
router.register("cost-centers", CostCenterViewSet, basename="cost-center")
urlpatterns = [
    path("usage/", UsageView.as_view(), name="usage"),
    path("usage/events/", UsageEventsView.as_view(), name="usage-events"),
    path("usage/forecast/", UsageForecastView.as_view(), name="usage-forecast"),
    path("chargeback/", ChargebackView.as_view(), name="chargeback"),
    path("billing/stripe/webhook/", StripeWebhookView.as_view(), name="stripe-webhook"),
    *router.urls,
    path("ledger/<slug:tenant>/verify/", LedgerVerifyView.as_view(), name="ledger-verify"),
]
