"""The jobs app's periodic work (apps.core.periodic): the embedded ticker and Celery beat run it."""

from apps.core.periodic import register

from .reconciler import reconcile_jobs

register("reconcile-jobs", reconcile_jobs, every=2.0)
