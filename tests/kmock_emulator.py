"""The Kubernetes API emulator behind tests/kmock_cluster.py (which runs it on loopback for synchronous tests).

kmock 0.8's KubernetesEmulator is an in-memory object store behind HTTP. `GryviaEmulator` fills its gaps:

* Namespaces: kmock's path parser cannot read `/api/v1/namespaces[/{name}]` (a 500 on every call), so those two
  paths are parsed here and fed to the same store: create/get/list/patch/apply/delete/watch all work, and deleting
  a Namespace deletes every object in it. Other cluster-scoped kinds (PriorityClass...) already work in kmock.
* Server-side apply (PATCH with `application/apply-patch+yaml`): creates the object when absent (kmock answers 404)
  and otherwise merges the applied manifest into it, with force=true and per `fieldManager`, as an API server does:
  maps merge key by key, lists and scalars are replaced whole (atomic), and the fields the manager applied last
  time but omits now are removed; fields others wrote (status, labels set by other clients) stay. A
  `metadata.resourceVersion` in any PATCH is a precondition: 409 when it is not the stored one (or the object is
  gone). Other PATCH types stay kmock's recursive JSON merge.
* Deleting an object deletes its dependents (objects whose `ownerReferences` name its uid) unless the propagation
  policy is `Orphan`, as the garbage collector does; a write to `/status` changes the status alone, with a new
  `resourceVersion`; with `require_namespaces`, a write into a missing namespace is a 404 naming it; `down` (see
  KmockCluster.outage) closes every connection unanswered.
* Server-set metadata on create: `namespace` from the URL (kmock's watch needs it), `uid`, `creationTimestamp`,
  `generateName`, and a cluster-wide `resourceVersion` bumped on every write.
* LIST and WATCH filter by `labelSelector` (equality-based) and `fieldSelector` (dotted paths); lists return
  `kind: XList`, items sorted and, like a real API server, without `apiVersion`/`kind`.
* WATCH ends after `timeoutSeconds` (kmock ignores it), unless `honor_watch_timeout=False`.
* Every kind in `apps.cluster.backends.base.KINDS` is declared, so listing an empty kind gives [] rather than 404.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal.rendering import StreamingError

from apps.cluster.backends.base import KINDS, labels_match

APPLY_PATCH = "application/apply-patch+yaml"
NAMESPACES = kmock.resource("", "v1", "namespaces")
_NAMESPACE_PATH = re.compile(r"/api/v1/namespaces(?:/(?P<name>[^/]+))?/?")


def group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


_KINDS = {(*group_version(k.api_version), k.plural): k for k in KINDS.values()}
_COLLECTION_ACTIONS = {"GET": kmock.action.LIST, "POST": kmock.action.CREATE}
_OBJECT_ACTIONS = {"GET": kmock.action.FETCH, "PATCH": kmock.action.UPDATE, "DELETE": kmock.action.DELETE}


def _sort_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _field(obj: dict[str, Any], dotted: str) -> str | None:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return None if value is None else str(value)


def fields_match(obj: dict[str, Any], selector: str) -> bool:
    """Field selectors `a.b=v`, `a.b==v`, `a.b!=v`, comma separated, over the object's dotted paths."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key.strip()) == value.strip():
                return False
        else:
            key, value = term.replace("==", "=").split("=", 1)
            if _field(obj, key.strip()) != value.strip():
                return False
    return True


# Fields an apply names without owning them.
_UNOWNED = {
    ("apiVersion",),
    ("kind",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "resourceVersion"),
}


def _applied_paths(obj: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The fields an apply sets: map keys all the way down; lists and scalars are leaves (atomic)."""
    paths: set[tuple[str, ...]] = set()
    for key, value in obj.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            paths |= _applied_paths(value, path)
        else:
            paths.add(path)
    return paths - _UNOWNED if not prefix else paths


def _drop_path(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    """Remove the field at `path`, and the maps that removal leaves empty."""
    parents: list[tuple[dict[str, Any], str]] = []
    node = obj
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            return
        parents.append((node, key))
        node = child
    node.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key]:
            break
        del parent[key]


def _merge_applied(base: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any]:
    for key, value in applied.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge_applied(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _merge_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (None deletes) that turns `old` into `new`."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            patch[key] = _merge_diff(old[key], value)
        elif old.get(key) != value or key not in old:
            patch[key] = value
    return patch


def _status_response(code: int, message: str, *, details: dict[str, str] | None = None) -> aiohttp.web.Response:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "message": message}
    if details:
        body["details"] = details
    return aiohttp.web.json_response(body, status=code)


@attrs.define(kw_only=True)
class GryviaEmulator(kmock.KubernetesEmulator):
    """kmock's KubernetesEmulator plus Namespaces, apply-creates, selectors and server-side watch timeouts."""

    honor_watch_timeout: bool = True
    require_namespaces: bool = False
    down: bool = attrs.field(default=False, init=False)  # see KmockCluster.outage()
    _revision: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    # (resource, namespace, name, field manager) -> the fields that manager's last apply set
    _applied: dict[tuple[Any, str | None, str | None, str], set[tuple[str, ...]]] = attrs.field(
        factory=dict, init=False
    )
    _last_revision: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for (group, version, plural), kind in _KINDS.items():
            self.resources[kmock.resource(group, version, plural)] = kmock.ResourceInfo(
                kind=kind.kind, namespaced=kind.namespaced
            )

    def _next_revision(self) -> str:
        self._last_revision = next(self._revision)
        return str(self._last_revision)

    # -- Namespaces: parse the paths kmock cannot ----------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if self.down:  # an API server that is down: the connection closes with no answer
            if raw_request.transport is not None:
                raw_request.transport.abort()
            return aiohttp.web.Response(status=503)  # never sent: the connection is gone
        match = _NAMESPACE_PATH.fullmatch(raw_request.path)
        if match is None:
            return await super().__call__(raw_request)
        raw_response: aiohttp.web.StreamResponse | None = None
        try:  # mirrors kmock.RawHandler.__call__, with our own parsing of the request
            request = await self._parse_namespace_request(raw_request, match["name"])
            self._requests.append(request)
            try:
                return await self._handle(request)
            except StreamingError as exc:
                raw_response = exc.args[0]
                raise (exc.__cause__ or exc) from None
        except Exception as exc:
            if not self._errors:
                raise
            self._errors[-1].append(exc)
            if raw_response is None or not raw_response.prepared:
                return await self._render_error(exc)
            await self._stream_error(exc, raw_response)
            await raw_response.write_eof()
            return raw_response

    async def _parse_namespace_request(self, raw: aiohttp.web.BaseRequest, name: str | None) -> kmock.Request:
        body = await raw.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        method = raw.method.upper()
        if method == "GET" and raw.query.get("watch") == "true":
            action: kmock.action | None = kmock.action.WATCH
        else:
            action = (_COLLECTION_ACTIONS if name is None else _OBJECT_ACTIONS).get(method)
        return kmock.Request(
            id=len(self._requests),
            raw_request=raw,
            url=raw.url,
            method=raw.method,
            params=dict(raw.query),
            headers=dict(raw.headers),
            cookies=dict(raw.cookies),
            body=body,
            text=body.decode("utf-8", "replace"),
            data=data,
            action=action,
            resource=NAMESPACES,
            namespace=None,
            name=name,
        )

    # -- writes: server-set metadata, apply semantics, namespace cascade ----------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if request.resource is not None and request.subresource in (None, "status") and isinstance(request.data, dict):
            refusal = self._refusal(request)
            if refusal is not None:
                return refusal
            prepared = self._prepare_write(request) if request.subresource is None else self._prepare_status(request)
            if prepared is not request:  # kmock matches reactions by the identity of recorded requests
                index = next(i for i in range(len(self._requests) - 1, -1, -1) if self._requests[i] is request)
                self._requests[index] = request = prepared
        deleting = self._stored(request) if request.action == kmock.action.DELETE and request.name else None
        response = await super()._handle(request)
        if request.action == kmock.action.DELETE and response.status < 300:
            for key in [k for k in self._applied if k[:3] == (request.resource, request.namespace, request.name)]:
                del self._applied[key]
            if deleting is not None and (request.data or {}).get("propagationPolicy") != "Orphan":
                await self._collect_dependents(deleting)
        if request.resource == NAMESPACES and request.action == kmock.action.DELETE and response.status < 300:
            await self._cascade_namespace_delete(request.name)
        return response

    def _refusal(self, request: kmock.Request) -> aiohttp.web.Response | None:
        """The API server's answer to a write it refuses: into a missing namespace (404, as NamespaceLifecycle
        answers, when `require_namespaces`), or against a stale `metadata.resourceVersion` (409)."""
        writes = request.action in (kmock.action.CREATE, kmock.action.UPDATE)
        namespace = request.namespace
        if self.require_namespaces and writes and namespace and request.resource != NAMESPACES:
            key = (NAMESPACES, None, namespace)
            if key not in self.objects or self.objects[key].deleted:
                message = f'namespaces "{namespace}" not found'
                return _status_response(404, message, details={"name": namespace, "kind": "namespaces"})
        conflict = self._version_conflict(request)
        return None if conflict is None else _status_response(409, conflict)

    def _version_conflict(self, request: kmock.Request) -> str | None:
        """Why a PATCH naming a `metadata.resourceVersion` fails its precondition (None: it does not)."""
        wanted = ((request.data or {}).get("metadata") or {}).get("resourceVersion")
        if request.action != kmock.action.UPDATE or not wanted:
            return None
        stored = self._stored(request)
        actual = ((stored or {}).get("metadata") or {}).get("resourceVersion")
        if stored is None:
            return f"{request.name}: the object no longer exists (resourceVersion {wanted})"
        if str(actual) != str(wanted):
            return f"{request.name}: the object has been modified; please apply your changes to the latest version"
        return None

    def _stored(self, request: kmock.Request) -> dict[str, Any] | None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].last.raw)

    def _prepare_write(self, request: kmock.Request) -> kmock.Request:
        is_apply = request.headers.get("Content-Type", "").split(";")[0].strip() == APPLY_PATCH
        if request.action == kmock.action.CREATE or (request.action == kmock.action.UPDATE and is_apply):
            old = self._stored(request) if request.action == kmock.action.UPDATE else None
            data = copy.deepcopy(request.data)
            meta = data.setdefault("metadata", {})
            owner = (request.resource, request.namespace, request.name, request.params.get("fieldManager", ""))
            if is_apply:
                previous = self._applied.get(owner, set())
                self._applied[owner] = _applied_paths(request.data)
            if old is None:  # a POST, or an apply of an object that does not exist yet: create it
                if request.namespace:
                    meta.setdefault("namespace", request.namespace)
                if request.name:
                    meta.setdefault("name", request.name)
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
                meta["resourceVersion"] = self._next_revision()
                return attrs.evolve(request, data=data, action=kmock.action.CREATE)
            # An apply of an existing object: drop what this manager applied before and omits now, then merge.
            merged = copy.deepcopy(old)
            for path in previous - self._applied[owner]:
                _drop_path(merged, path)
            merged = _merge_applied(merged, request.data)
            merged.setdefault("metadata", {})["resourceVersion"] = self._next_revision()
            return attrs.evolve(request, data=_merge_diff(old, merged))
        if request.action == kmock.action.UPDATE and self._stored(request) is not None:
            data = copy.deepcopy(request.data)
            data.setdefault("metadata", {})["resourceVersion"] = self._next_revision()
            return attrs.evolve(request, data=data)
        return request

    def _prepare_status(self, request: kmock.Request) -> kmock.Request:
        """A write to `/status` changes the status alone and, like any write, bumps the `resourceVersion`."""
        if request.action != kmock.action.UPDATE or self._stored(request) is None:
            return request
        data = {"status": copy.deepcopy(request.data.get("status") or {})}
        data["metadata"] = {"resourceVersion": self._next_revision()}
        return attrs.evolve(request, data=data)

    async def _collect_dependents(self, owner: dict[str, Any]) -> None:
        """The garbage collector: objects whose ownerReferences name a deleted owner's uid go too (at once here)."""
        uid = (owner.get("metadata") or {}).get("uid")
        async with self._lock:
            for (resource, _ns, _name), obj in list(self.objects.items()):
                if obj.deleted:
                    continue
                refs = (obj.last.raw.get("metadata") or {}).get("ownerReferences") or []
                if uid and any(ref.get("uid") == uid for ref in refs):
                    raw = obj.last.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})

    async def _cascade_namespace_delete(self, namespace: str | None) -> None:
        async with self._lock:
            for (resource, ns, _), obj in list(self.objects.items()):
                if ns == namespace and resource != NAMESPACES and not obj.deleted:
                    raw = obj.last.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})

    # -- reads: selectors, list shape, watch timeout -------------------------------------------------------------

    @staticmethod
    def _selected(request: kmock.Request, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels_match(labels, request.params.get("labelSelector", "")) and fields_match(
            obj, request.params.get("fieldSelector", "")
        )

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        result = await super()._serve_list(request)
        items = [copy.deepcopy(item) for item in result["items"] if self._selected(request, item)]
        for item in items:  # a real API server omits these in list items
            item.pop("apiVersion", None)
            item.pop("kind", None)
        items.sort(key=_sort_key)
        assert request.resource is not None
        kind = _KINDS.get((request.resource.group, request.resource.version, request.resource.plural))
        group, version = request.resource.group, request.resource.version
        return {
            "apiVersion": f"{group}/{version}" if group else str(version),
            "kind": f"{kind.kind if kind else 'Object'}List",
            "metadata": {"resourceVersion": str(self._last_revision)},
            "items": items,
        }

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        inner = super()._serve_watch(request)
        timeout = request.params.get("timeoutSeconds") if self.honor_watch_timeout else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(timeout) if timeout else None
        try:
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return
                try:
                    item = await asyncio.wait_for(anext(inner), remaining)
                except (StopAsyncIteration, TimeoutError):
                    return
                if isinstance(item, dict) and not self._selected(request, item.get("object") or {}):
                    continue
                yield item
        finally:
            await inner.aclose()
