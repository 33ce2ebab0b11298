"""The queueing app's periodic work (apps.core.periodic): the embedded ticker and Celery beat run it."""

from apps.core.periodic import register

from .admission_objects import reconcile_admission_objects
from .reconciler import reconcile_priority_classes
from .reservations import reconcile_reservations

register("reconcile-priority-classes", reconcile_priority_classes, every=30.0)
register("reconcile-admission-objects", reconcile_admission_objects, every=30.0)
register("reconcile-reservations", reconcile_reservations, every=30.0)
