"""The cross-tenant matrix: tenant B reads, changes and deletes objects of every kind tenant A owns, through every
/api/v1/ operation that addresses one, and gets 404 each time; B's lists do not change when A creates them.

The operations come from the schema (/api/v1/schema/) and the objects from tests/tenant_kinds.py, so a new endpoint
is covered without editing this file: a path with parameters that no kind fills and no exemption names fails
`test_every_path_is_covered_or_exempt` until its kind is registered (tests/api_contract.py) or exempted here.
"""

from __future__ import annotations

from typing import Any

import pytest

from apps.tenants.services import api_key_issue_bound
from tests.factories import client_for
from tests.jobs.factories import make_job
from tests.tenant_kinds import Owned, api_schema, generic, make_every_kind, owner_of, placeholders

pytestmark = pytest.mark.django_db

# Paths (parameters written `{}`) whose objects belong to no tenant, each with why it is exempt.
EXEMPT = {
    "/api/v1/cohorts/{}/": "platform-level: every credential reads cohorts; writes are platform staff's (403 tested "
    "in tests/queueing)",
    "/api/v1/priority-classes/{}/": "platform-level, as cohorts",
    "/api/v1/skus/{}/": "the platform's GPU SKU catalog: every credential with billing:read reads it",
    "/api/v1/cost-centers/{}/": "the platform's cost centers: platform staff only (403 for every tenant key, "
    "tests/billing/test_chargeback.py)",
}
# Operations that take a scope no tenant admin key holds, with how to make B's credential that holds it.
CREDENTIALS = {
    # A trainer's report token: jobs:report, bound to one of B's jobs.
    "POST /api/v1/jobs/{name}/checkpoints/": lambda tenant: api_key_issue_bound(
        tenant=tenant, bound_to=f"job:{make_job(tenant).uid}", scopes=["jobs:report"], name="matrix"
    ),
}
# B's requests carry a body where the operation takes one; the view must answer 404 before it reads it.
METHODS = ("get", "put", "patch", "post")


def _exempt(path: str) -> bool:
    return any(generic(path).startswith(prefix) for prefix in EXEMPT)


def _paths() -> dict[str, dict[str, Any]]:
    return api_schema()["paths"]


def _addressed(paths: dict[str, dict[str, Any]], owned: list[Owned]) -> list[tuple[str, str, str]]:
    """(method, schema path, A's concrete path) for every operation that addresses one of A's objects."""
    out = []
    for path, operations in paths.items():
        owner = owner_of(path, owned) if placeholders(path) and not _exempt(path) else None
        if owner is not None:
            out += [(method, path, owner.fill(path)) for method in (*METHODS, "delete") if method in operations]
    return out


def _call(client, method: str, path: str):
    if method in ("get", "delete"):
        return getattr(client, method)(path)
    return getattr(client, method)(path, {}, format="json")


def _body(response) -> Any:
    """What a response says, less what changes with the clock (a report's default period ends now, a forecast is
    made at now)."""
    if not response["Content-Type"].startswith("application/json"):
        return response.content
    body = response.json()
    return {k: v for k, v in body.items() if k not in ("start", "end", "at")} if isinstance(body, dict) else body


def test_every_path_is_covered_or_exempt(tenant_a):
    paths = _paths()
    owned = make_every_kind(tenant_a, paths)
    uncovered = [p for p in paths if placeholders(p) and not _exempt(p) and owner_of(p, owned) is None]
    assert uncovered == [], "register these paths' kind in tests/api_contract.py or tests/tenant_kinds.py"
    stale = [prefix for prefix in EXEMPT if not any(generic(p).startswith(prefix) for p in paths)]
    assert stale == [], "exemptions naming no path"


def test_tenant_b_gets_404_from_every_operation_on_tenant_as_objects(tenant_a, tenant_b, client_a, client_b):
    paths = _paths()
    owned = make_every_kind(tenant_a, paths)
    operations = _addressed(paths, owned)
    reads = {concrete: client_a.get(concrete) for method, _path, concrete in operations if method == "get"}
    assert {c: r.status_code for c, r in reads.items() if r.status_code != 200} == {}, "A reads its own objects"

    # Deletes last: were one to succeed, the other operations would answer 404 for the wrong reason.
    clients = {op: client_for(make(tenant_b)) for op, make in CREDENTIALS.items()}
    answers = {}
    for method, path, concrete in sorted(operations, key=lambda op: op[0] == "delete"):
        response = _call(clients.get(f"{method.upper()} {path}", client_b), method, concrete)
        answers[f"{method.upper()} {path}"] = (response.status_code, concrete, response.content[:200])
    assert {op: a for op, a in answers.items() if a[0] != 404} == {}
    # Nothing B sent changed what A reads.
    changed = [c for c, before in reads.items() if _body(client_a.get(c)) != _body(before)]
    assert changed == []


def test_tenant_b_lists_do_not_change_when_tenant_a_creates_objects(tenant_a, client_a, client_b):
    paths = _paths()
    lists = [p for p, ops in paths.items() if "get" in ops and not placeholders(p) and p != "/api/v1/schema/"]
    before = {p: client_b.get(p) for p in lists}
    owned = make_every_kind(tenant_a, paths)
    after = {p: client_b.get(p) for p in lists}
    changed = {p: (_body(before[p]), _body(after[p])) for p in lists if _body(before[p]) != _body(after[p])}
    assert changed == {}
    # Control: A's collection lists show A's objects, so an unchanged list for B means B does not see them.
    for obj in owned:
        collection = obj.template.rsplit("{}", 1)[0]
        if collection in lists:
            assert obj.values[-1] in client_a.get(collection).content.decode(), (obj.kind, collection)
