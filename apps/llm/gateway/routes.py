"""Which upstreams a model name reaches for a tenant: the route table, cached in process and reloaded off-loop.

A name resolves, for tenant T, to T's own enabled services publishing it if there are any, else to the shared ones
(a tenant's name shadows a shared one). An alias (T's own first, then shared) stands for its targets in order: the
first target with a route serves, and the next is tried when an upstream fails before answering. Within a name,
services are chosen by weight; within a service, its ready replicas in turn. Only services whose status is Ready
(or external ones that are enabled) are routes.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field

from django.conf import settings

from apps.core.crypto import decrypt
from apps.llm import routing
from apps.llm.choices import Runtime, ServicePhase
from apps.llm.models import InferenceService, ModelAlias

from .db import off_loop


@dataclass
class Upstream:
    """One inference service as the gateway calls it."""

    service: str
    tenant_id: int | None
    task: str
    runtime: str
    endpoints: list[str]  # base URLs ending in /v1
    upstream_model: str
    weight: int
    credential: str = field(repr=False)
    tokenize_url: str | None = None
    context_length: int | None = None
    _turn: itertools.count = field(default_factory=itertools.count, repr=False)

    def endpoint_order(self) -> list[str]:
        """Its replicas, starting from the next in turn (the rest follow, for retries)."""
        start = next(self._turn) % len(self.endpoints)
        return self.endpoints[start:] + self.endpoints[:start]


@dataclass
class Table:
    by_tenant: dict[int | None, dict[str, list[Upstream]]]  # tenant id (None: shared) -> model name -> upstreams
    aliases: dict[int | None, dict[str, list[str]]]
    loaded_at: float
    generation: int
    # Whose inference services exist at all, in any state (None: shared ones): without any, a 404 says how to add one.
    owners: frozenset[int | None] = frozenset()

    def has_no_service(self, tenant_id: int) -> bool:
        """Neither the tenant nor the platform has an inference service (ready or not): nothing was ever set up."""
        return tenant_id not in self.owners and None not in self.owners

    def names(self, tenant_id: int) -> list[str]:
        """Every model name the tenant may call (its own, shared, and aliases that lead somewhere)."""
        out = set(self.by_tenant.get(tenant_id, {})) | set(self.by_tenant.get(None, {}))
        for scope in (tenant_id, None):
            for alias, targets in self.aliases.get(scope, {}).items():
                if any(self._direct(tenant_id, t) for t in targets):
                    out.add(alias)
        return sorted(out)

    def _direct(self, tenant_id: int, name: str) -> list[Upstream]:
        return self.by_tenant.get(tenant_id, {}).get(name) or self.by_tenant.get(None, {}).get(name) or []

    def resolve(self, tenant_id: int, name: str) -> list[list[Upstream]]:
        """The upstream groups to try for `name`, in order (one group per alias target; one group if no alias)."""
        direct = self._direct(tenant_id, name)
        if direct:
            return [direct]
        targets = self.aliases.get(tenant_id, {}).get(name) or self.aliases.get(None, {}).get(name) or []
        return [group for group in (self._direct(tenant_id, t) for t in targets) if group]


def weighted_order(group: list[Upstream]) -> list[Upstream]:
    """The group's services in a random order drawn by weight (the first is the one to call)."""
    pool = [u for u in group if u.weight > 0] or list(group)
    order = []
    while pool:
        pick = random.choices(pool, weights=[max(u.weight, 1) for u in pool])[0]
        order.append(pick)
        pool.remove(pick)
    return order


def _endpoints(service: InferenceService) -> list[str]:
    if service.runtime == Runtime.EXTERNAL:
        return [service.url.rstrip("/")]
    urls = [u for u in (service.status_endpoints or []) if u] or (
        [service.status_endpoint] if service.status_endpoint else []
    )
    return [u.rstrip("/") for u in urls]


def _tokenize_url(service: InferenceService, endpoint: str) -> str | None:
    """The runtime's own token counter, when it has one (a count that downloads nothing)."""
    root = endpoint.removesuffix("/v1")
    if service.runtime in (Runtime.VLLM, Runtime.SENTENCE_TRANSFORMERS):
        return f"{root}/tokenize"
    if service.runtime == Runtime.LLAMACPP:
        return f"{root}/extras/tokenize/count"
    return None


def _load_table(generation: int) -> Table:
    by_tenant: dict[int | None, dict[str, list[Upstream]]] = {}
    for service in InferenceService.objects.filter(enabled=True).order_by("pk"):
        ready = service.runtime == Runtime.EXTERNAL or service.status_phase in (
            ServicePhase.READY,
            ServicePhase.DEGRADED,
        )
        endpoints = _endpoints(service)
        if not ready or not endpoints:
            continue
        upstream = Upstream(
            service=service.name,
            tenant_id=service.tenant_id,
            task=service.task,
            runtime=service.runtime,
            endpoints=endpoints,
            upstream_model=service.upstream_model or service.model_name,
            weight=service.weight,
            credential=decrypt(service.credential_encrypted),
            tokenize_url=_tokenize_url(service, endpoints[0]),
            context_length=service.context_length,
        )
        by_tenant.setdefault(service.tenant_id, {}).setdefault(service.model_name, []).append(upstream)
    aliases: dict[int | None, dict[str, list[str]]] = {}
    for alias in ModelAlias.objects.all():
        aliases.setdefault(alias.tenant_id, {})[alias.name] = list(alias.targets)
    owners = frozenset(InferenceService.objects.values_list("tenant_id", flat=True).distinct())
    return Table(by_tenant=by_tenant, aliases=aliases, loaded_at=time.monotonic(), generation=generation, owners=owners)


_load_async = off_loop(_load_table)
_table: Table | None = None
_loading: asyncio.Future | None = None


async def table() -> Table:
    """The current route table; reloaded (once, however many requests wait) when stale or changed."""
    global _table, _loading
    current = _table
    if (
        current is not None
        and current.generation == routing.current
        and time.monotonic() - current.loaded_at < settings.GRYVIA_LLM_CACHE_TTL_S
    ):
        return current
    if _loading is not None and not _loading.done() and _loading.get_loop() is asyncio.get_running_loop():
        return await asyncio.shield(_loading)
    loop = asyncio.get_running_loop()
    _loading = loop.create_future()
    try:
        fresh = await _load_async(routing.current)
    except BaseException as exc:
        _loading.set_exception(exc)
        _loading.exception()  # retrieved: waiting requests see it, nobody logs it as unhandled
        _loading = None
        if current is not None:  # keep serving the last table while the database is unreachable
            return current
        raise
    _table = fresh
    _loading.set_result(fresh)
    return fresh


def forget() -> None:
    """Drop the cached table (tests; routing.routes_changed() makes the next request reload it)."""
    global _table
    _table = None
