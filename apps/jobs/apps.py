from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.billing.selectors import job_runs_register
        from apps.core import events

        from .selectors import job_timeouts, job_visible

        # Billing is below jobs: it asks which jobs still exist (its orphan sweep) and their timeouts (its forecast).
        job_runs_register(job_timeouts)
        # The kind of live events this app emits (apps.core.events; a client may subscribe to one job).
        events.register_kind("job", read_scope="jobs:read", visible=job_visible)
