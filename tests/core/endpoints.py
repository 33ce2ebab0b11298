"""Contract registration for /api/v1/audit/ (read-only; tenant admins and platform staff)."""

import itertools

from apps.core.models import AuditEntry
from apps.tenants import services
from tests.api_contract import Endpoint, register
from tests.factories import ACTOR

_renames = itertools.count(1)


def _make_audit_entry(tenant) -> str:
    services.tenant_update(actor=ACTOR, tenant=tenant, display_name=f"renamed {next(_renames)}")
    return str(AuditEntry.all_tenants.filter(tenant=tenant).latest("id").id)


register(
    Endpoint(
        name="audit",
        model=AuditEntry,
        list_path=lambda t: "/api/v1/audit/",
        detail_path=lambda t, i: f"/api/v1/audit/{i}/",
        make=_make_audit_entry,
        read_scope="admin",
    )
)
