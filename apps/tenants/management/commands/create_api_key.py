import json as _json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.core.principal import system
from apps.tenants import services
from apps.tenants.models import Tenant


class Command(BaseCommand):
    help = "Create an API key and print it once (it is not stored and cannot be shown again)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--scopes", default="admin", help="comma-separated, e.g. jobs:read,jobs:write")
        parser.add_argument("--platform", action="store_true", help="a platform staff key, acting across tenants")
        parser.add_argument("--json", action="store_true", help='print {"id": ..., "key": ...}')

    def handle(self, *args, tenant: str, name: str, scopes: str, platform: bool, json: bool, **options) -> None:
        target = Tenant.objects.filter(slug=tenant, archived_at__isnull=True).first()
        if target is None:
            raise CommandError(f"tenant {tenant!r} does not exist")
        try:
            key, plaintext = services.api_key_create(
                actor=system("cli"),
                tenant=target,
                scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                name=name,
                is_platform=platform,
            )
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        if json:
            self.stdout.write(_json.dumps({"id": key.key_id, "key": plaintext, "scopes": key.scopes}))
        else:
            self.stdout.write(f"id:  {key.key_id}\nkey: {plaintext}\n(shown once: store it now)")
