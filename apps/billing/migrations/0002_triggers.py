"""The database refuses UPDATE and DELETE of ledger entries and of final usage records (apps.billing.models.triggers):
PostgreSQL and SQLite each get their own trigger SQL."""

from django.db import migrations

from apps.billing.models import triggers


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(triggers.forwards, triggers.backwards, elidable=False)]
