"""The API contract every tenant-owned endpoint keeps, as data: register an `Endpoint` and
tests/test_api_contract.py runs the checks for it (isolation 404s, 401s, 403s, one audit row per write,
unknown fields refused with nothing written, list query counts that do not grow with the page).

Later endpoints add themselves with `register(Endpoint(...))` in a module listed in `ENDPOINT_MODULES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import models

ENDPOINT_MODULES = [
    "tests.core.endpoints",
    "tests.tenants.endpoints",
    "tests.jobs.endpoints",
    "tests.queueing.endpoints",
    "tests.webhooks.endpoints",
    "tests.billing.endpoints",
    "tests.llm.endpoints",
]


@dataclass
class Endpoint:
    name: str
    model: type[models.Model]
    list_path: Callable[[Any], str]
    detail_path: Callable[[Any, str], str]
    make: Callable[[Any], str]  # create one object in the tenant, return its id in URLs
    read_scope: str | None
    write_scope: str | None = None  # None: read-only endpoint
    create_payload: Callable[[Any], dict[str, Any]] | None = None
    update_payload: dict[str, Any] | None = None
    deletes: bool = False
    # Scopes of a key that can read here but must be refused writes (403).
    read_only_scopes: list[str] = field(default_factory=list)
    # Where a row's id is in list and create responses (a key, or a path into nested objects).
    id_field: tuple[str, ...] = ("id",)

    def id_of(self, row: dict[str, Any]) -> str:
        value: Any = row
        for part in self.id_field:
            value = value[part]
        return str(value)


ENDPOINTS: list[Endpoint] = []


def register(endpoint: Endpoint) -> Endpoint:
    ENDPOINTS.append(endpoint)
    return endpoint


def load() -> list[Endpoint]:
    import importlib

    for module in ENDPOINT_MODULES:
        importlib.import_module(module)
    return ENDPOINTS
