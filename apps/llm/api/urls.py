from django.urls import path
from rest_framework.routers import DefaultRouter

from .usage import LlmUsageView
from .views import InferenceServiceViewSet, ModelAliasViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("inference-services", InferenceServiceViewSet, basename="inference-service")
router.register("model-aliases", ModelAliasViewSet, basename="model-alias")
urlpatterns = [*router.urls, path("usage/llm/", LlmUsageView.as_view(), name="llm-usage")]
