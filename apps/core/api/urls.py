from rest_framework.routers import DefaultRouter

from .audit import AuditEntryViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("audit", AuditEntryViewSet, basename="audit")
urlpatterns = router.urls
