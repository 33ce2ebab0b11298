from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "apps.cluster"
    label = "cluster"
    default_auto_field = "django.db.models.BigAutoField"
