"""First-start set-up of the embedded profile: an admin login and a `demo` tenant with an admin API key.

Runs once: the credentials are printed to the terminal (never through logging) and written to
$GRYVIA_DATA_DIR/demo-credentials.json (mode 0600). Later runs only say where that file is. Every run registers the
packaged local models (tiny-chat, minilm) as shared inference services when the models extra is installed, and
says which (apps.llm.local_registry).

`--print-demo-key` prints the demo key alone (for `KEY=$(...)`, from whatever GRYVIA_DATA_DIR says);
`--rotate-demo-key` creates a fresh demo key, revokes the one in the file (dead or alive), stores and prints the new
one.
"""

import json
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apps.core.principal import system
from apps.llm.local_registry import register_local_models
from apps.tenants import services
from apps.tenants.models import ApiKey, Tenant

CLI_CLIENT_ID = "gryvia-cli"
CLI_DEVICE_CLIENT_ID = "gryvia-cli-device"


class Command(BaseCommand):
    help = "Create the admin login, the demo tenant and its API key on first start (idempotent)."

    def add_arguments(self, parser) -> None:
        what = parser.add_mutually_exclusive_group()
        what.add_argument("--print-demo-key", action="store_true", help="print the demo API key alone, and stop")
        what.add_argument(
            "--rotate-demo-key", action="store_true", help="replace the demo API key: print and store a new one"
        )

    def handle(self, *args, print_demo_key: bool = False, rotate_demo_key: bool = False, **options) -> None:
        path = settings.DATA_DIR / "demo-credentials.json"
        if print_demo_key:
            self.stdout.write(self._read_credentials(path)["api_key"])
            return
        if rotate_demo_key:
            self._rotate_demo_key(path)
            return
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
        _write_credentials(path, creds)
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

    def _read_credentials(self, path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise CommandError(
                f"no demo credentials in {path}: `make run` (manage.py bootstrap) writes them on first start; "
                "is GRYVIA_DATA_DIR the one the server uses?"
            ) from None

    def _rotate_demo_key(self, path: Path) -> None:
        """A new key with the old one's scopes; the old one is revoked, in one transaction, and the file updated."""
        creds = self._read_credentials(path)
        tenant = Tenant.objects.filter(slug=creds.get("tenant", "demo")).first()
        if tenant is None:
            raise CommandError(f"the tenant {creds.get('tenant', 'demo')!r} of {path} no longer exists")
        old = ApiKey.all_tenants.filter(tenant=tenant, key_id=creds.get("api_key_id", "")).first()
        actor = system("bootstrap")
        with transaction.atomic():
            key, plaintext = services.api_key_create(
                actor=actor, tenant=tenant, scopes=old.scopes if old else ["admin"], name="demo-admin"
            )
            if old is not None:
                services.api_key_revoke(actor=actor, key=old)
        creds.update(api_key_id=key.key_id, api_key=plaintext)
        _write_credentials(path, creds)
        revoked = f"; key {old.key_id} is revoked" if old is not None else ""
        self.stdout.write(f"New demo API key (tenant {tenant.slug}, saved to {path}){revoked}:\n{plaintext}")

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


def _write_credentials(path: Path, creds: dict) -> None:
    """Replace the file whole, never readable by others: a 0600 temporary file renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds, fh, indent=2)
    os.chmod(tmp, 0o600)  # whatever the umask
    os.replace(tmp, path)
