from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.billing.selectors import job_runs_register

        from .selectors import job_timeouts

        # Billing is below jobs: it asks which jobs still exist (its orphan sweep) and their timeouts (its forecast).
        job_runs_register(job_timeouts)
