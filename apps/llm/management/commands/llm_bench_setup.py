"""Set up the gateway benchmark's tenant (make bench-gateway): a tenant `bench` with a daily token quota, an
external inference service to the stand-in upstream and an `llm:invoke` key with per-minute limits, so every request
goes through auth, both quota scopes, the rate limit and metering. Prints `key=<plaintext>` (a throwaway key for a
throwaway database)."""

from django.core.management.base import BaseCommand
from django.db import transaction

from apps.core.principal import system
from apps.llm import services as llm_services
from apps.llm.models import InferenceService
from apps.tenants import services as tenant_services
from apps.tenants.models import Tenant

BIG = 2**31 - 1  # limits that are counted on every request and never reached (the largest allowed)


class Command(BaseCommand):
    help = "Create the bench tenant, an external inference service to --upstream-url and a key (prints key=...)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--upstream-url", required=True, help="The stand-in upstream's base URL (…/v1)")
        parser.add_argument("--model", default="fake-gpt")
        parser.add_argument("--upstream-key", default="")
        parser.add_argument("--tenant", default="bench")

    @transaction.atomic
    def handle(self, *args, upstream_url: str, model: str, upstream_key: str, tenant: str, **options) -> None:
        actor = system("llm-bench-setup")
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            found = tenant_services.tenant_create(actor=actor, slug=tenant, tokens_per_day=BIG)
        InferenceService.objects.filter(tenant=found, name=model).delete()
        llm_services.inference_service_create(
            actor=actor,
            tenant=found,
            name=model,
            runtime="external",
            model=model,
            url=upstream_url,
            credential=upstream_key,
        )
        _key, plaintext = tenant_services.api_key_create(
            actor=actor,
            tenant=found,
            scopes=["llm:invoke"],
            name="bench",
            requests_per_minute=BIG,
            tokens_per_minute=BIG,
            tokens_per_day=BIG,
        )
        self.stdout.write(f"tenant={found.slug} model={model} upstream={upstream_url}")
        self.stdout.write(f"key={plaintext}")
