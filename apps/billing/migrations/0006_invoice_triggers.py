"""The database refuses changes to an invoice past Draft and to its lines (apps.billing.models.triggers, group
`invoices`): PostgreSQL and SQLite each get their own trigger SQL."""

from django.db import migrations

from apps.billing.models import triggers


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_stripe")]

    operations = [migrations.RunPython(triggers.invoices_forwards, triggers.invoices_backwards, elidable=False)]
