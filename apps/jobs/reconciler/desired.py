"""The job reconciler's desired objects: each job's PVC, token Secret, workload and headless Service, and the
memo that builds a running job's objects once rather than every pass its pods change.

One `DesiredState` per pass: it asks the pass's admission whether a waiting job may start, its recovery whether a
job is overdue or lost, its node placement where a GPU job goes, and its tokens for a Secret's token.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings
from django.utils import timezone

from apps.cluster.services import object_key
from apps.core.reconcile import Desired
from apps.core.scopes import JOBS_REPORT
from apps.queueing.services import kai_queue_name, pod_template_patch, suspend_patch
from apps.tenants.services import api_key_issue_bound

from .. import manifests
from ..choices import JobPhase
from ..models import Job
from .admitting import PassAdmission
from .placement import NodePlacement
from .recovery import RUNNING_PHASES, Recovery, deadline, workload_has_ended
from .tokens import Tokens

TOKEN_PLACEHOLDER = "issued-at-apply"
# job uid -> (its steady inputs, its desired objects, each loading a fresh copy from its JSON): see desired_hashed.
# Only ever a shortcut, bounded: a fresh process builds every job's objects once.
_DESIRED: dict[str, tuple[tuple, list[Desired]]] = {}
_DESIRED_MAX = 50_000


def has_workload(objects: Any) -> bool:
    """Whether these objects (manifests or live objects) include a workload (a Job or a StatefulSet)."""
    return any(o.get("kind") in ("Job", "StatefulSet") for o in objects)


class DesiredState:
    """What each job wants in the cluster this pass, and the last touch of a manifest before it is applied."""

    def __init__(
        self,
        *,
        mode: str,
        now: dt.datetime,
        admission: PassAdmission,
        recovery: Recovery,
        nodes: NodePlacement,
        tokens: Tokens,
    ) -> None:
        self.mode = mode
        self.now = now
        self.admission = admission
        self.recovery = recovery
        self.nodes = nodes
        self.tokens = tokens

    def _expired(self, job: Job) -> bool:
        """A finished job's objects are collected `ttlSecondsAfterFinished` (default GRYVIA_JOB_TTL_S) after its end."""
        if not job.is_terminal or job.completion_time is None:
            return False
        ttl = job.spec.get("ttlSecondsAfterFinished")
        ttl = settings.GRYVIA_JOB_TTL_S if ttl is None else int(ttl)
        return timezone.now() >= job.completion_time + dt.timedelta(seconds=ttl)

    def desired(self, owner: Job, live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The job's manifests this pass: its PVC always (until its TTL), its Secret, workload and Service while it
        is admitted and neither ending nor evicted, a finished workload kept until the TTL."""
        spec, ns, tenant = owner.typed_spec, owner.tenant.namespace, owner.tenant.slug
        common = {"name": owner.name, "namespace": ns, "uid": owner.uid_text, "tenant": tenant}
        pvc = manifests.data_pvc(spec, **common)
        keep = [pvc] if pvc is not None else []
        decision = self.admission.decisions.get(owner.pk)
        evicting = owner.phase == JobPhase.PREEMPTED or (decision is not None and decision.outcome == "evict")
        if owner.is_terminal or owner.cancel_requested_at is not None or evicting:
            if self._expired(owner):
                return []
            if owner.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED) and workload_has_ended(live.values()):
                # Finished on its own: the workload (and its pods' logs) stay until the TTL, never re-created. One
                # that Gryvia ended (its deadline passed, its workload lost) goes: nothing outlives its job.
                done = [
                    self._workload(owner, common, owner.placement or None),
                    manifests.headless_service(spec, **common),
                ]
                keep += [m for m in done if object_key(m) in live]
            return keep
        if self.recovery.is_overdue(owner, live):
            return keep  # past its timeout: observe() fails it, and its workload goes in this pass
        exists = has_workload(live.values())
        native = self.mode == "native"
        lost = not exists and owner.phase in RUNNING_PHASES  # it had a workload and the cluster no longer has it
        if lost:
            if not self.recovery.workload_missing(owner):
                return keep  # its retries are used: observe() fails it (WorkloadLost)
        elif native and not exists and (decision is None or decision.outcome != "admit"):
            return keep  # waiting in its queue (or rejected): nothing runs yet
        placement = owner.placement or None
        if native and spec.gpus_per_pod and not placement and not exists:
            placement = self.nodes.place(owner)
            if placement is None:
                return keep
        return [
            *keep,
            manifests.token_secret(spec, token=TOKEN_PLACEHOLDER, **common),
            self._workload(owner, common, placement),
            manifests.headless_service(spec, **common),
        ]

    def desired_hashed(
        self, owner: Job, live: dict[str, dict[str, Any]], *, build: Callable[[Job, dict[str, Any]], list[Desired]]
    ) -> list[Desired]:
        """A running job's objects are built and hashed once per set of inputs (`_steady_inputs`), when its workload
        is created, not again each pass its pods change: later passes compare the remembered hashes, and decode a
        fresh copy of a manifest from its JSON only to apply it again. `build` hashes desired()'s manifests."""
        uid = owner.uid_text
        inputs = self._steady_inputs(owner) if has_workload(live.values()) else None
        if inputs is not None:
            hit = _DESIRED.get(uid)
            if hit is not None and hit[0] == inputs:
                return hit[1]
        else:  # waiting, ending or ended: what was remembered no longer applies (a later start builds afresh)
            _DESIRED.pop(uid, None)
        out = build(owner, live)
        manifests_ = [item.load() for item in out]
        if inputs is None and has_workload(manifests_):
            inputs = self._steady_inputs(owner)  # being created: as the next pass will see it (placement recorded)
        if inputs is not None:
            if len(_DESIRED) >= _DESIRED_MAX:
                _DESIRED.clear()
            try:
                remembered = [
                    Desired(item.key, item.digest, functools.partial(orjson.loads, orjson.dumps(manifest)))
                    for item, manifest in zip(out, manifests_, strict=True)
                ]
            except orjson.JSONEncodeError:  # a value orjson cannot write (an integer beyond 64 bits): built each pass
                _DESIRED.pop(uid, None)
            else:
                _DESIRED[uid] = (inputs, remembered)
        return out

    def _steady_inputs(self, owner: Job) -> tuple | None:
        """Everything desired() reads for a job whose workload exists, or is being created, and that is not being
        evicted, cancelled or finished (its spec through its generation); None for any other job, whose objects
        desired() decides afresh."""
        if owner.is_terminal or owner.cancel_requested_at is not None or owner.phase == JobPhase.PREEMPTED:
            return None
        end = deadline(owner)
        if end is not None and self.now >= end:
            return None  # desired() decides afresh whether it is overdue
        if self.admission.outcome(owner.pk) == "evict":
            return None
        placement = self.nodes.placements.get(owner.pk) or owner.placement or None
        placed = (tuple(sorted(set(placement["nodes"]))), bool(placement.get("reserved"))) if placement else None
        tenant = owner.tenant
        api_url = settings.GRYVIA_INTERNAL_API_URL
        return (owner.generation, owner.name, tenant.namespace, tenant.slug, self.mode, api_url, placed)

    def _workload(self, owner: Job, common: dict[str, str], placement: dict[str, Any] | None) -> dict[str, Any]:
        """The workload manifest, built the same way for its whole life (its hash must not drift once created)."""
        spec = owner.typed_spec
        workload = manifests.workload(
            spec,
            api_url=settings.GRYVIA_INTERNAL_API_URL,
            placed_on=sorted(set(placement["nodes"])) if placement else None,
            reserved=bool(placement and placement.get("reserved")),
            **common,
        )
        queue = owner.spec.get("queueName") or "default"
        if self.mode == "kueue":  # created suspended; Kueue unsuspends it when admitted
            workload = suspend_patch(workload, queue_name=queue, priority_class=spec.raw.get("priorityClassName"))
        elif self.mode == "kai":
            template = pod_template_patch(workload["spec"]["template"], queue=kai_queue_name(common["tenant"], queue))
            workload = {**workload, "spec": {**workload["spec"], "template": template}}
        return workload

    def prepare(self, owner: Job, manifest: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """A Secret gets its token (issued this pass, or now); the Service an owner reference to the workload."""
        if manifest["kind"] == "Secret":  # a fresh token each time the Secret is (re)created
            token = self.tokens.take(f"job:{owner.uid_text}") or api_key_issue_bound(
                tenant=owner.tenant, bound_to=f"job:{owner.uid_text}", scopes=[JOBS_REPORT], name=f"job {owner.name}"
            )
            return {**manifest, "stringData": {"token": token}}
        if manifest["kind"] == "Service":
            workload = next((o for o in results.values() if o.get("kind") in ("Job", "StatefulSet")), None)
            if workload is not None and (workload.get("metadata") or {}).get("uid"):
                meta = {**manifest["metadata"], "ownerReferences": manifests.owned_by(workload)}
                return {**manifest, "metadata": meta}
        return manifest
