from rest_framework.routers import DefaultRouter

from .views import CohortViewSet, PriorityClassViewSet, QueueViewSet, ReservationViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("queues", QueueViewSet, basename="queue")
router.register("reservations", ReservationViewSet, basename="reservation")
router.register("cohorts", CohortViewSet, basename="cohort")
router.register("priority-classes", PriorityClassViewSet, basename="priority-class")
urlpatterns = router.urls
