"""`Model.all_tenants` (the unscoped manager) only where code is platform-wide by nature.

Everywhere a tenant is known, code reads through `Model.objects` inside `tenant_scope(tenant)` (apps.core.scoping),
which raises when the scope is missing instead of returning every tenant's rows. `ALLOWED` lists the modules under
apps/ (or single functions, `path::name`) that may name `all_tenants`, each with its reason; any other use fails
this test.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parents[2] / "apps"

# Module paths relative to the repository root (fnmatch patterns; `*` also crosses "/"), or a module's top-level
# function or class (`path::name`, exact), and why each may.
ALLOWED: dict[str, str] = {
    # What every app is built on: the scoping itself, the base models and viewsets, the accelerators.
    "apps/core/scoping.py": "defines the scoping",
    "apps/core/models.py": "declares the manager on the base models",
    "apps/core/api/viewsets.py": "the empty queryset of a request with no tenant",
    "apps/core/db/*.py": "documents the any_of lookup on an unscoped QuerySet",
    # Reconcilers: one pass walks every tenant's objects.
    "apps/*/reconciler.py": "reconciler",
    "apps/*/reconciler/*.py": "reconciler",
    "apps/jobs/admission/inputs.py": "the job reconciler's admission reads every queue's waiting and admitted jobs",
    "apps/queueing/services/status.py": "the job reconciler's queue status write, every queue at once",
    "apps/queueing/reservations.py": "the reservations' claim sweep over every tenant, run by the job reconciler",
    # Platform-wide selectors: the reads other apps and the platform's own views make across tenants.
    "apps/*/selectors.py": "platform-wide selectors",
    "apps/*/selectors/*.py": "platform-wide selectors",
    # The admin site and platform-scope management commands: platform staff see every tenant.
    "apps/*/admin.py": "admin",
    "apps/*/admin/*.py": "admin",
    "apps/*/management/commands/*.py": "platform-scope management command",
    # Models: a row re-reading its own committed state by primary key (immutability guards).
    "apps/*/models.py": "a model reading its own row by primary key",
    "apps/*/models/*.py": "a model reading its own row by primary key",
    # Billing's platform-wide ledger, metering and invoicing: runs, sweeps and chains across tenants.
    "apps/billing/services/ledger.py": "the ledger's hash chain and its verification, platform-wide",
    "apps/billing/services/metering.py": "metering of every tenant's usage",
    "apps/billing/services/runs.py": "the job runs the reconciler opens and closes, every tenant's",
    "apps/billing/services/reservations.py": "the reservation metering sweep, every tenant's",
    "apps/billing/services/budgets/evaluation.py": "the budget evaluation sweep over every budget",
    "apps/billing/services/invoicing/*.py": "invoice runs over every tenant; a state change locks the row by key",
    "apps/billing/services/chargeback.py": "the platform's chargeback report across tenants",
    "apps/billing/services/catalog.py": "whether any tenant's usage refers to a SKU",
    "apps/billing/services/stripe_sync/*.py": "Stripe's webhooks name an invoice, not a tenant; the sync sweep",
    # Credentials: the tenant is what the lookup finds out.
    "apps/tenants/services/credentials.py": "resolving a presented API key: its tenant is not known before",
    "apps/llm/gateway/keys.py": "the gateway resolving a presented API key: its tenant is not known before",
    "apps/llm/gateway/meter.py": "the gateway's usage flush, many tenants' keys at once",
    # Webhooks: the outbox fan-out and the delivery worker drain every tenant's queue.
    "apps/webhooks/outbox.py": "the outbox fan-out of events to every tenant's endpoints",
    "apps/webhooks/delivery.py": "the delivery worker, claiming due deliveries of every tenant",
    "apps/webhooks/failures.py::endpoint_failures_record": "the delivery worker's count, given an endpoint's id only",
    "apps/tenants/services/bound_keys.py": "the job reconciler revokes the keys of the jobs it ended, every tenant's",
    "apps/tenants/services/sso.py::memberships_sync_from_claims": (
        "an SSO login reads the user's memberships in every tenant: the claim decides which tenants they are"
    ),
    # Budgets may belong to no tenant (platform budgets): no tenant scope holds them.
    "apps/billing/services/budgets/writes.py": "budgets of no tenant (platform budgets)",
    "apps/billing/api/budgets.py": "budgets of no tenant (platform budgets)",
}


def _uses_of_all_tenants() -> list[str]:
    """`path::name` of each top-level function or class (or `path::` for module level) naming `.all_tenants`."""
    found = []
    for path in sorted(APPS.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        module = path.relative_to(APPS.parent).as_posix()
        for top in ast.parse(path.read_text(), filename=str(path)).body:
            if any(isinstance(node, ast.Attribute) and node.attr == "all_tenants" for node in ast.walk(top)):
                found.append(f"{module}::{getattr(top, 'name', '')}")
    return sorted(set(found))


def _allowed(use: str) -> bool:
    module = use.partition("::")[0]
    return use in ALLOWED or any("::" not in pattern and fnmatch(module, pattern) for pattern in ALLOWED)


def test_all_tenants_only_where_allowed():
    found = _uses_of_all_tenants()
    assert found, "nothing names all_tenants: the scan found nothing (wrong root?)"
    outside = [use for use in found if not _allowed(use)]
    assert not outside, (
        "these modules use Model.all_tenants where a tenant is known; read through Model.objects inside "
        f"tenant_scope(tenant), or add the module to ALLOWED with its reason: {outside}"
    )


@pytest.mark.parametrize(
    ("use", "allowed"),
    [
        ("apps/jobs/reconciler/writer.py::PassMixin", True),
        ("apps/billing/selectors/usage.py::usage_summary", True),
        ("apps/tenants/management/commands/create_tenant.py::Command", True),
        ("apps/webhooks/failures.py::endpoint_failures_record", True),
        ("apps/webhooks/services.py::endpoint_update", False),
        ("apps/jobs/services.py::job_cancel", False),
        ("apps/webhooks/api/views.py::WebhookEndpointViewSet", False),
        ("apps/llm/services.py::", False),
    ],
)
def test_the_allow_list_tells_services_from_platform_code(use, allowed):
    assert _allowed(use) is allowed
