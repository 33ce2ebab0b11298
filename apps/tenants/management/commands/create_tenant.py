import json as _json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.core.principal import system
from apps.tenants import services


class Command(BaseCommand):
    help = "Create a tenant (namespace tenant-<slug> follows through the reconciler)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--display-name", default="")
        parser.add_argument("--gpus", type=int, default=None, help="GPU ceiling, all types together")
        parser.add_argument("--json", action="store_true", help="print the tenant as JSON")

    def handle(self, *args, slug: str, display_name: str, gpus: int | None, json: bool, **options) -> None:
        try:
            tenant = services.tenant_create(actor=system("cli"), slug=slug, display_name=display_name, max_gpus=gpus)
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        if json:
            self.stdout.write(_json.dumps({"slug": tenant.slug, "namespace": tenant.namespace, "max_gpus": gpus}))
        else:
            self.stdout.write(f"created tenant {tenant.slug} (namespace {tenant.namespace})")
