"""One object of every tenant-owned kind, made in a tenant, and the /api/v1/ paths that address it.

The kinds come from the API contract's registry (tests/api_contract.py) plus `EXTRA_KINDS` below, for kinds the
contract does not register. Which schema path reaches which object is derived, not listed: an object's detail path
is matched against the schema's paths, and every path under it (its actions, its nested lists) is filled with its
identifiers. tests/test_tenant_matrix.py and tests/test_fuzz_api.py both use this.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from drf_spectacular.generators import SchemaGenerator

from apps.billing import services as billing
from apps.billing.models import UsageRecord
from apps.llm import services as llm
from apps.tenants.models import Tenant
from tests.api_contract import load
from tests.factories import ACTOR

_PARAM = re.compile(r"\{[^}/]+\}")
_seq = itertools.count(1)


def api_schema() -> dict[str, Any]:
    """The /api/v1/ OpenAPI schema, as /api/v1/schema/ serves it."""
    return SchemaGenerator().get_schema(request=None, public=True)


def _inference_service(tenant: Tenant) -> str:
    name = f"matrix-svc-{next(_seq)}"
    llm.inference_service_create(actor=ACTOR, tenant=tenant, name=name, runtime="vllm", model="org/some-model")
    return f"/api/v1/inference-services/{name}/"


def _model_alias(tenant: Tenant) -> str:
    name = f"matrix-alias-{next(_seq)}"
    llm.model_alias_create(actor=ACTOR, tenant=tenant, name=name, targets=["some-model"])
    return f"/api/v1/model-aliases/{name}/"


def _usage_record(tenant: Tenant) -> str:
    event = {"id": f"matrix-{next(_seq)}", "start": "2021-03-01T00:00:00Z", "end": "2021-03-01T01:00:00Z"}
    billing.usage_events_ingest(tenant=tenant, events=[event])
    return f"/api/v1/usage/records/{UsageRecord.all_tenants.filter(tenant=tenant).latest('id').uid}/"


# Kinds the contract registry lacks: each makes one object in the tenant and returns its detail path.
EXTRA_KINDS: dict[str, Callable[[Tenant], str]] = {
    "tenant": lambda t: f"/api/v1/tenants/{t.slug}/",
    "ledger": lambda t: f"/api/v1/ledger/{t.slug}/verify/",
    "inference-service": _inference_service,
    "model-alias": _model_alias,
    "usage-record": _usage_record,
}


def placeholders(path: str) -> int:
    return len(_PARAM.findall(path))


def generic(path: str) -> str:
    """`path` with each parameter written `{}`."""
    return _PARAM.sub("{}", path)


@dataclass(frozen=True)
class Owned:
    """One object of a kind, as addressed in the API: its schema path (`{}` for each parameter) and its values."""

    kind: str
    template: str  # "/api/v1/webhooks/{}/deliveries/{}/"
    values: tuple[str, ...]

    def covers(self, path: str) -> bool:
        return generic(path).startswith(self.template) and placeholders(path) <= len(self.values)

    def fill(self, path: str) -> str:
        values = iter(self.values)
        return _PARAM.sub(lambda _m: next(values), path)


def _as_owned(kind: str, concrete: str, templates: Iterable[str]) -> Owned:
    for template in templates:
        match = re.fullmatch("([^/]+)".join(re.escape(part) for part in _PARAM.split(template)), concrete)
        if match:
            return Owned(kind, generic(template), match.groups())
    raise AssertionError(f"{kind}: its detail path {concrete} is not in the /api/v1/ schema")


def make_every_kind(tenant: Tenant, paths: Iterable[str]) -> list[Owned]:
    """One object of every kind in `tenant`, each with the schema path it matched among `paths`."""
    templates = sorted((p for p in paths if placeholders(p)), key=placeholders, reverse=True)
    owned = []
    for endpoint in load():
        concrete = endpoint.detail_path(tenant, endpoint.make(tenant))
        owned.append(_as_owned(endpoint.name, concrete, templates))
    for kind, make in EXTRA_KINDS.items():
        owned.append(_as_owned(kind, make(tenant), templates))
    return owned


def owner_of(path: str, owned: Iterable[Owned]) -> Owned | None:
    """The object whose identifiers fill `path`: the one with the longest template that `path` starts with."""
    found = [o for o in owned if o.covers(path)]
    return max(found, key=lambda o: len(o.template)) if found else None
