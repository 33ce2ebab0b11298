from rest_framework.routers import DefaultRouter

from .views import WebhookEndpointViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("webhooks", WebhookEndpointViewSet, basename="webhook")
urlpatterns = router.urls
