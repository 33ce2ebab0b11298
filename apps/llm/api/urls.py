from rest_framework.routers import DefaultRouter

from .views import InferenceServiceViewSet, ModelAliasViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("inference-services", InferenceServiceViewSet, basename="inference-service")
router.register("model-aliases", ModelAliasViewSet, basename="model-alias")
urlpatterns = router.urls
