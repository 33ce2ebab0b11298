"""OAuth access and refresh tokens issued before hashed storage (COMPLIANT_BCP_RFC9700_TOKEN_STORAGE) lose their
plaintext column. django-oauth-toolkit already looks every token up by its SHA-256 `token_checksum` (filled for old
rows by its migrations 0012 and 0015), so they keep working; a copy of the database no longer holds usable ones."""

from django.db import migrations


def forwards(apps, schema_editor):
    for model in ("AccessToken", "RefreshToken"):
        apps.get_model("oauth2_provider", model).objects.exclude(token="").exclude(token_checksum="").update(token="")


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0004_apikey_verbose_name"),
        ("oauth2_provider", "0022_refreshtoken_token_family_index"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
