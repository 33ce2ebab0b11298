"""The reconcile framework: push what the database wants to the cluster, and write back what happened.

A pass (AWX's task manager, Pulp's CAS transitions):
1. takes a non-blocking lock (a pass already running elsewhere means this one is skipped);
2. makes one LIST per managed kind, by our label selector;
3. for each owner row, in a count and time budget, does nothing when its generation was observed and the live
   objects carry the spec hashes last applied; otherwise builds its manifests, applies what differs, deletes
   what it no longer wants, and writes status with a compare-and-swap on `generation`;
4. deletes orphans: live objects with our labels whose owner no longer exists (or is archived).
No database transaction is held across a cluster call.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from apps.cluster.services import (
    SPEC_HASH_ANNOTATION,
    ClusterBackend,
    ClusterError,
    NamespaceMissingError,
    ObjectRef,
    ResourceKind,
    object_key,
)

from . import periodic
from .db import fastjson
from .locks import LockedRead, try_advisory_lock
from .metrics import RECONCILE_DURATION, RECONCILE_ERRORS

logger = logging.getLogger(__name__)
Owner = TypeVar("Owner")


@dataclass
class ReconcileStats:
    skipped: bool = False
    examined: int = 0
    reconciled: int = 0
    applied: int = 0
    deleted: int = 0
    orphans: int = 0
    errors: int = 0
    lists: int = 0
    truncated: bool = False
    duration_s: float = 0.0


def spec_hash(manifest: dict[str, Any]) -> str:
    return hashlib.sha256(fastjson.canonical(manifest)).hexdigest()[:16]


def with_spec_hash(manifest: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The manifest annotated with the hash of its content, so a later pass can compare without diffing."""
    digest = spec_hash(manifest)
    meta = dict(manifest.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), SPEC_HASH_ANNOTATION: digest}
    return {**manifest, "metadata": meta}, digest


class Desired(NamedTuple):
    """One object a reconciler wants: its key, the hash of its content, and how to get its manifest (a fresh
    dict the caller may change, or the one desired() built)."""

    key: str
    digest: str
    load: Callable[[], dict[str, Any]]


def _same(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest


def live_hash(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)


class OwnerReconciler(ABC, Generic[Owner]):
    """Reconciles owner rows (tenants, jobs, services, ...) to the cluster objects labelled with them."""

    kind: str
    managed_kinds: tuple[ResourceKind, ...]
    # Kinds only read each pass (one LIST each, grouped by owner) to derive status, never applied or collected.
    observed_kinds: tuple[ResourceKind, ...] = ()
    label_selector: str
    # Cluster-scoped kinds last, so namespaced objects go before their namespace.
    delete_order: tuple[str, ...] = ()
    # The label naming an object's owner key, when that is all owner_key_of() reads (the pass then reads it itself).
    owner_label: str | None = None
    # The periodic pass (a name in apps.core.periodic's registry, a function taking the backend) that makes the
    # namespaces this reconciler's objects go into. An apply that finds its namespace missing (the cluster was
    # emptied, or the namespace deleted by hand) runs it first, with this pass's backend, once per namespace and
    # pass, then retries.
    namespace_pass: str | None = "reconcile-tenants"

    def __init__(self, backend: ClusterBackend, *, max_per_pass: int = 500, budget_s: float = 15.0) -> None:
        self.backend = backend
        self.max_per_pass = max_per_pass
        self.budget_s = budget_s
        self.live_by_owner: dict[str | None, dict[str, dict[str, Any]]] = {}
        self.namespaces_made: dict[str, bool] = {}  # this pass's runs of namespace_pass: namespace -> it ran
        self.observed_by_owner: dict[str | None, dict[str, list[dict[str, Any]]]] = {}

    # -- what a subclass provides -----------------------------------------------------------------------------

    @abstractmethod
    def owners(self) -> Iterable[Owner]:
        """Every owner that should have objects in the cluster."""

    @abstractmethod
    def owner_key(self, owner: Owner) -> str: ...

    @abstractmethod
    def owner_key_of(self, obj: dict[str, Any]) -> str | None:
        """The owner key a live object names in its labels (None: no owner)."""

    @abstractmethod
    def desired(self, owner: Owner, live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The manifests this owner wants (pure apart from `live`: the owner's objects in the cluster now)."""

    @abstractmethod
    def generation(self, owner: Owner) -> tuple[int, int]:
        """(generation, observed_generation)."""

    @abstractmethod
    def applied(self, owner: Owner) -> dict[str, str]:
        """Object key -> spec hash, as recorded by the last successful reconcile."""

    @abstractmethod
    def write_status(self, owner: Owner, *, generation: int, applied: dict[str, str]) -> None:
        """CAS status write after a successful reconcile."""

    @abstractmethod
    def record_error(self, owner: Owner, message: str) -> None: ...

    # -- optional hooks ---------------------------------------------------------------------------------------

    def begin_pass(self, observed: dict[str | None, dict[str, list[dict[str, Any]]]]) -> None:
        """Read what the whole pass needs once (capacity, nodes, ...), before the owners.

        `observed` holds this pass's objects of the observed kinds, by owner key and kind.
        """

    def owners_alive(self, keys: set[str]) -> set[str]:
        """Of these owner keys, named by live objects but not among this pass's `owners()`, those whose owner still
        exists (its objects are kept). Default: none; a reconciler whose `owners()` leaves out owners that need
        nothing this pass (jobs waiting in a queue) says here which of them exist, so their objects are no orphans.
        """
        return set()

    def end_pass(self) -> None:
        """After the owners, before orphans are collected: write back what the pass buffered."""

    def needs_work(self, owner: Owner, live: dict[str, dict[str, Any]]) -> bool:
        """Default: a spec change not yet observed, or live objects that differ from what was applied."""
        generation, observed_generation = self.generation(owner)
        if generation != observed_generation:
            return True
        applied = self.applied(owner)
        if set(applied) != set(live):
            return True
        return any(live_hash(live[key]) != digest for key, digest in applied.items())

    def prepare(self, owner: Owner, manifest: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Last touch before an apply, after hashing (fill in what exists only at apply time, e.g. a token)."""
        return manifest

    def desired_hashed(self, owner: Owner, live: dict[str, dict[str, Any]]) -> list[Desired]:
        """`desired()`, each manifest annotated with the hash of its content: (object key, hash, manifest loader).
        What a pass compares with the live objects; a manifest is loaded only when it is to be applied, so a
        reconciler whose manifests are costly to build may memoize them and hand out only their hashes."""
        out = []
        for manifest in self.desired(owner, live):
            manifest, digest = with_spec_hash(manifest)
            out.append(Desired(object_key(manifest), digest, functools.partial(_same, manifest)))
        return out

    def observe(self, owner: Owner, live: dict[str, dict[str, Any]], observed: dict[str, list[dict[str, Any]]]) -> None:
        """Derive status from the live objects and the observed kinds (every pass, for every owner examined)."""

    # -- the pass ---------------------------------------------------------------------------------------------

    def lock_reads(self) -> list[LockedRead]:
        """Reads a pass makes first, sent with the attempt to take the reconciler's lock (one round trip); their
        rows reach their receivers only when the lock was taken (apps.core.locks)."""
        return []

    def run_pass(self) -> ReconcileStats:
        stats = ReconcileStats()
        started = time.monotonic()
        with try_advisory_lock(f"reconcile:{self.kind}", reads=self.lock_reads()) as acquired:
            if not acquired:
                stats.skipped = True
                return stats
            try:
                self._pass(stats, started)
            finally:
                stats.duration_s = time.monotonic() - started
                RECONCILE_DURATION.labels(kind=self.kind).observe(stats.duration_s)
        return stats

    def _pass(self, stats: ReconcileStats, started: float) -> None:
        self.namespaces_made = {}
        observed: dict[str | None, dict[str, dict[str, Any]]] = {}
        extra: dict[str | None, dict[str, list[dict[str, Any]]]] = {}
        try:
            label, owner_of = self.owner_label, self.owner_key_of
            for kind in self.managed_kinds:
                stats.lists += 1
                # object_key(obj) for an object of the listed kind, inlined: a pass keys every object it lists.
                prefix, namespaced = f"{kind.kind}/", kind.namespaced
                for obj in self.backend.list(kind, label_selector=self.label_selector):
                    meta = obj.get("metadata") or {}
                    owner = (meta.get("labels") or {}).get(label) if label else owner_of(obj)
                    namespace = (meta.get("namespace") if namespaced else None) or ""
                    observed.setdefault(owner, {})[f"{prefix}{namespace}/{meta['name']}"] = obj
            for kind in self.observed_kinds:
                stats.lists += 1
                for obj in self.backend.list(kind, label_selector=self.label_selector):
                    owner = ((obj.get("metadata") or {}).get("labels") or {}).get(label) if label else owner_of(obj)
                    extra.setdefault(owner, {}).setdefault(kind.kind, []).append(obj)
            # What owners() may look at to leave out owners with nothing to do: their live and observed objects.
            self.live_by_owner, self.observed_by_owner = observed, extra
            self.begin_pass(extra)
        except ClusterError as exc:
            stats.errors += 1
            RECONCILE_ERRORS.labels(kind=self.kind).inc()
            logger.warning("%s pass: cannot list the cluster: %s", self.kind, exc)
            return
        live_owner_keys: set[str] = set()
        for owner in self.owners():
            key = self.owner_key(owner)
            live_owner_keys.add(key)
            live = observed.pop(key, {})
            if stats.truncated:
                continue
            stats.examined += 1
            if not self.needs_work(owner, live):
                continue
            if stats.reconciled >= self.max_per_pass or time.monotonic() - started > self.budget_s:
                stats.truncated = True
                continue
            stats.reconciled += 1
            live = self._reconcile_one(owner, live, stats)
            if live is not None:
                self._observe(owner, live, extra.get(key, {}), stats)
        self.end_pass()
        leftover = {key for key in observed if key is not None and key not in live_owner_keys}
        live_owner_keys |= self.owners_alive(leftover) if leftover else set()
        for key, objects in observed.items():
            if key in live_owner_keys:
                continue
            for obj in self._ordered(objects.values()):
                try:
                    if self.backend.delete(ObjectRef.of(obj)):
                        stats.orphans += 1
                except ClusterError as exc:
                    stats.errors += 1
                    RECONCILE_ERRORS.labels(kind=self.kind).inc()
                    logger.warning("%s pass: cannot delete orphan %s: %s", self.kind, object_key(obj), exc)

    def _observe(
        self, owner: Owner, live: dict[str, dict[str, Any]], extra: dict[str, list[dict[str, Any]]], stats
    ) -> None:
        try:
            self.observe(owner, live, extra)
        except ClusterError as exc:
            stats.errors += 1
            RECONCILE_ERRORS.labels(kind=self.kind).inc()
            self.record_error(owner, f"{type(exc).__name__}: {exc}")

    def _apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Apply; when the namespace is missing, make it first (`namespace_pass`) and apply once more."""
        try:
            return self.backend.apply(manifest)
        except NamespaceMissingError as exc:
            if not self._make_namespace(exc.namespace):
                raise
        return self.backend.apply(manifest)

    def _make_namespace(self, namespace: str) -> bool:
        """Run `namespace_pass` for a missing namespace, at most once per namespace and pass; whether it ran."""
        if not self.namespace_pass:
            return False
        if namespace not in self.namespaces_made:
            logger.warning("%s pass: namespace %s is missing; %s runs first", self.kind, namespace, self.namespace_pass)
            stats = periodic.run_periodic(self.namespace_pass, self.backend)
            self.namespaces_made[namespace] = not (isinstance(stats, ReconcileStats) and stats.skipped)
        return self.namespaces_made[namespace]

    def _ordered(self, objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        rank = {name: i for i, name in enumerate(self.delete_order)}
        return sorted(objects, key=lambda o: rank.get(o.get("kind", ""), -1))

    def _reconcile_one(
        self, owner: Owner, live: dict[str, dict[str, Any]], stats: ReconcileStats
    ) -> dict[str, dict[str, Any]] | None:
        """Apply what differs and delete what is no longer wanted; returns the owner's objects as they now are."""
        generation, _ = self.generation(owner)
        applied: dict[str, str] = {}
        now = dict(live)
        try:
            for key, digest, load in self.desired_hashed(owner, live):
                applied[key] = digest
                current = live.get(key)
                if current is None or live_hash(current) != digest:
                    manifest = load()
                    now[key] = self._apply(self.prepare(owner, manifest, now)) or manifest
                    stats.applied += 1
            for obj in self._ordered(o for k, o in live.items() if k not in applied):
                self.backend.delete(ObjectRef.of(obj))
                now.pop(object_key(obj), None)
                stats.deleted += 1
        except ClusterError as exc:
            stats.errors += 1
            RECONCILE_ERRORS.labels(kind=self.kind).inc()
            logger.warning("%s %s: %s", self.kind, self.owner_key(owner), exc)
            self.record_error(owner, f"{type(exc).__name__}: {exc}")
            return None
        self.write_status(owner, generation=generation, applied=applied)
        return now
