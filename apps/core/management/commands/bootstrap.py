"""First-start set-up of the embedded profile: an admin login and a `demo` tenant with an admin API key.

Runs once: the credentials are printed to the terminal (never through logging) and written to
$GRYVIA_DATA_DIR/demo-credentials.json (mode 0600). Later runs only say where that file is. Every run registers the
packaged local models (tiny-chat, minilm) as shared inference services when the models extra is installed, and
says which (apps.llm.local_registry).
"""

import json
import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.core.principal import system
from apps.llm.local_registry import register_local_models
from apps.tenants import services
from apps.tenants.models import Tenant

CLI_CLIENT_ID = "gryvia-cli"
CLI_DEVICE_CLIENT_ID = "gryvia-cli-device"


class Command(BaseCommand):
    help = "Create the admin login, the demo tenant and its API key on first start (idempotent)."

    def handle(self, *args, **options) -> None:
        path = settings.DATA_DIR / "demo-credentials.json"
        self._ensure_cli_application()
        self.stdout.write(register_local_models(actor=system("bootstrap")).summary())
        if Tenant.objects.filter(slug="demo").exists() or get_user_model().objects.filter(is_superuser=True).exists():
            self.stdout.write(f"Gryvia is set up; first-start credentials are in {path}")
            return
        password = secrets.token_urlsafe(18)
        with transaction.atomic():
            user = get_user_model().objects.create_superuser("admin", "admin@localhost", password)
            actor = system("bootstrap")
            tenant = services.tenant_create(actor=actor, slug="demo", display_name="Demo tenant")
            services.membership_add(actor=actor, tenant=tenant, user=user, role="owner")
            key, plaintext = services.api_key_create(actor=actor, tenant=tenant, scopes=["admin"], name="demo-admin")
        creds = {
            "admin_url": f"http://127.0.0.1:{settings.GRYVIA_PORT}/admin/",
            "admin_username": "admin",
            "admin_password": password,
            "tenant": "demo",
            "api_key_id": key.key_id,
            "api_key": plaintext,
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(creds, fh, indent=2)
        os.chmod(path, 0o600)
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "=" * 72,
                    "Gryvia first start: these credentials are shown once (also saved, mode 0600, to",
                    f"  {path})",
                    f"  admin:    {creds['admin_url']}  user admin  password {password}",
                    f"  demo API key (tenant demo, scope admin): {plaintext}",
                    "=" * 72,
                    "",
                ]
            )
        )

    def _ensure_cli_application(self) -> None:
        """The public OAuth clients the `gryvia` CLI logs in with: authorization code + PKCE, and the device flow."""
        from oauth2_provider.models import get_application_model

        Application = get_application_model()
        Application.objects.get_or_create(
            client_id=CLI_DEVICE_CLIENT_ID,
            defaults={
                "name": "Gryvia CLI (device flow)",
                "client_type": Application.CLIENT_PUBLIC,
                "authorization_grant_type": Application.GRANT_DEVICE_CODE,
                "algorithm": Application.RS256_ALGORITHM,
            },
        )
        Application.objects.get_or_create(
            client_id=CLI_CLIENT_ID,
            defaults={
                "name": "Gryvia CLI",
                "client_type": Application.CLIENT_PUBLIC,
                "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
                "redirect_uris": "http://127.0.0.1/callback http://localhost/callback",
                "skip_authorization": False,
                "algorithm": Application.RS256_ALGORITHM,
            },
        )
