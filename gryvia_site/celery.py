"""The Celery app of the production profile (REDIS_URL set): `make worker` and `make beat`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gryvia_site.settings.base")

app = Celery("gryvia")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
