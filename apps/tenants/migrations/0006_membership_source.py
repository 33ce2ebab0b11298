from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0005_oauth_tokens_hashed_at_rest"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="source",
            field=models.CharField(blank=True, default="", max_length=10),
        ),
    ]
