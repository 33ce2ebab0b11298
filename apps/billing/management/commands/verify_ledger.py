"""`manage.py verify_ledger [TENANT ...]`: verify tenants' ledger chains; exit 1 when any is broken."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from apps.billing import services
from apps.tenants.models import Tenant


class Command(BaseCommand):
    help = "Verify the billing ledger's hash chain of each tenant (default: every tenant). Exit 1 if one is broken."

    def add_arguments(self, parser) -> None:
        parser.add_argument("tenants", nargs="*", metavar="TENANT", help="tenant slugs (default: all)")
        parser.add_argument("--json", dest="as_json", action="store_true", help="one JSON object per tenant")

    def handle(self, *args, tenants: list[str], as_json: bool = False, **options) -> None:
        queryset = Tenant.objects.order_by("slug")
        if tenants:
            found = set(queryset.filter(slug__in=tenants).values_list("slug", flat=True))
            missing = sorted(set(tenants) - found)
            if missing:
                raise CommandError(f"no such tenant: {', '.join(missing)}")
            queryset = queryset.filter(slug__in=tenants)
        broken = 0
        for tenant in queryset:
            result = services.ledger_verify(tenant=tenant)
            broken += not result.valid
            if as_json:
                self.stdout.write(_dumps(result.as_dict()))
                continue
            state = "ok" if result.valid else "BROKEN"
            self.stdout.write(f"{tenant.slug}: {state}, {result.entries} entries, head {result.head_sequence}")
            for problem in result.problems:
                self.stdout.write(f"  sequence {problem['sequence']}: {problem['problem']}")
        if broken:
            raise CommandError(f"{broken} ledger chain(s) broken", returncode=1)


def _dumps(data: dict) -> str:
    return json.dumps(data, sort_keys=True)
