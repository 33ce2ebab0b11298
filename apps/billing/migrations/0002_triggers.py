"""The database refuses UPDATE and DELETE of ledger entries and of final usage records (apps.billing.triggers):
PostgreSQL and SQLite each get their own trigger SQL."""

from django.db import migrations

from apps.billing import triggers


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(triggers.forwards, triggers.backwards, elidable=False)]
