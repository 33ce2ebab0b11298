"""The tenants app's periodic work (apps.core.periodic): the embedded ticker and Celery beat run it."""

from apps.core.periodic import register

from .reconciler import reconcile_tenants

# Each tenant's namespace, quotas and policies; other reconcilers run it first when a namespace is missing.
register("reconcile-tenants", reconcile_tenants, every=20.0)
