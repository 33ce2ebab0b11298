"""The demo tenant of the embedded profile, set up by `manage.py bootstrap` (apps.core.lifecycle's steps): an admin
login and a `demo` tenant with an admin API key.

Set up once: the credentials are printed to the terminal (never through logging) and written to
$GRYVIA_DATA_DIR/demo-credentials.json (mode 0600). Later runs only say where that file is.
`bootstrap --print-demo-key` prints the demo key alone (for `KEY=$(...)`, from whatever GRYVIA_DATA_DIR says);
`bootstrap --rotate-demo-key` creates a fresh demo key, revokes the one in the file (dead or alive), stores and
prints the new one.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, TextIO

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import transaction

from apps.core.principal import system
from apps.core.scoping import tenant_scope

from . import services
from .models import ApiKey, Tenant


def credentials_path() -> Path:
    return settings.DATA_DIR / "demo-credentials.json"


def demo_set_up(out: TextIO) -> None:
    """On first start, the admin login and the demo tenant with its key, printed once; later, where they are."""
    path = credentials_path()
    if Tenant.objects.filter(slug="demo").exists() or get_user_model().objects.filter(is_superuser=True).exists():
        out.write(f"Gryvia is set up; first-start credentials are in {path}")
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
    out.write(
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


def demo_key_print(out: TextIO) -> None:
    """The demo key alone."""
    out.write(_read_credentials(credentials_path())["api_key"])


def demo_key_rotate(out: TextIO) -> None:
    """A new key with the old one's scopes; the old one is revoked, in one transaction, and the file updated."""
    path = credentials_path()
    creds = _read_credentials(path)
    tenant = Tenant.objects.filter(slug=creds.get("tenant", "demo")).first()
    if tenant is None:
        raise CommandError(f"the tenant {creds.get('tenant', 'demo')!r} of {path} no longer exists")
    with tenant_scope(tenant):
        old = ApiKey.objects.filter(key_id=creds.get("api_key_id", "")).first()
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
    out.write(f"New demo API key (tenant {tenant.slug}, saved to {path}){revoked}:\n{plaintext}")


def _read_credentials(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CommandError(
            f"no demo credentials in {path}: `make run` (manage.py bootstrap) writes them on first start; "
            "is GRYVIA_DATA_DIR the one the server uses?"
        ) from None


def _write_credentials(path: Path, creds: dict[str, Any]) -> None:
    """Replace the file whole, never readable by others: a 0600 temporary file renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds, fh, indent=2)
    os.chmod(tmp, 0o600)  # whatever the umask
    os.replace(tmp, path)
