from django.apps import AppConfig


class QueueingConfig(AppConfig):
    name = "apps.queueing"
    label = "queueing"
    default_auto_field = "django.db.models.BigAutoField"
