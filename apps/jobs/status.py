"""Pure status derivation: from the live workload (batch/v1 Job or StatefulSet) and its pods to a job's phase.

Kubernetes and the local backend report the same shapes, so one function serves both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import choices as C
from .choices import JobPhase


@dataclass
class Observed:
    phase: str
    reason: str = ""
    message: str = ""
    attempts: int = 1
    current_nodes: int = 0
    ready_nodes: int = 0
    restarts: dict[str, int] = field(default_factory=dict)
    allocated_nodes: list[str] = field(default_factory=list)
    endpoint: str = ""
    start_time: str | None = None
    completion_time: str | None = None


def _true_conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}


def _pod_summary(pods: list[dict[str, Any]]) -> tuple[dict[str, int], list[str]]:
    per_index: dict[str, int] = {}
    nodes: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        index = (meta.get("labels") or {}).get(C.INDEX_LABEL) or (meta.get("annotations") or {}).get(C.INDEX_ANNOTATION)
        if index is not None:
            per_index[str(index)] = per_index.get(str(index), 0) + 1
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase in ("Pending", "Running"):
            nodes.add(node)
    return {i: n - 1 for i, n in sorted(per_index.items(), key=lambda kv: int(kv[0]))}, sorted(nodes)


def workload_ended(workload: dict[str, Any]) -> bool:
    """Whether a batch/v1 Job has completed or failed (from_batch_job's Succeeded or Failed)."""
    conditions = _true_conditions(workload.get("status") or {})
    return "Complete" in conditions or "Failed" in conditions


def from_batch_job(workload: dict[str, Any], pods: list[dict[str, Any]], *, was_running: bool) -> Observed:
    status = workload.get("status") or {}
    spec = workload.get("spec") or {}
    conditions = _true_conditions(status)
    restarts, nodes = _pod_summary(pods)
    failed = int(status.get("failed") or 0)
    expected = int(spec.get("parallelism") or spec.get("completions") or 1)
    out = Observed(
        phase=JobPhase.SCHEDULING,
        attempts=1 + failed,
        current_nodes=expected,
        ready_nodes=int(status.get("ready") or 0),
        restarts=restarts,
        allocated_nodes=nodes,
        start_time=status.get("startTime"),
    )
    if "Complete" in conditions:
        out.phase = JobPhase.SUCCEEDED
        out.completion_time = status.get("completionTime") or conditions["Complete"].get("lastTransitionTime")
    elif "Failed" in conditions:
        cond = conditions["Failed"]
        out.phase = JobPhase.FAILED
        out.reason = cond.get("reason") or "Failed"
        said = " ".join(filter(None, [cond.get("message"), _attempts(failed, spec)]))
        out.message = f"{out.reason}: {said}" if said else out.reason
        out.completion_time = cond.get("lastTransitionTime")
    elif status.get("ready") or status.get("active") or status.get("succeeded") or was_running:
        out.phase = JobPhase.RUNNING
    return out


def _attempts(failed: int, spec: dict[str, Any]) -> str:
    """The failed attempts against what `retryLimit` (the Job's backoffLimit) allows: the first and one per retry.
    Counted over the whole job, whatever its parallelism: a failed pod of any index is one failed attempt."""
    if not failed:
        return ""
    noun = "attempt" if failed == 1 else "attempts"
    limit = spec.get("backoffLimit")
    if limit is None:
        return f"({failed} failed {noun})"
    return f"({failed} failed {noun} of {int(limit) + 1} allowed by retryLimit {limit})"


def from_stateful_set(workload: dict[str, Any], pods: list[dict[str, Any]], *, default_endpoint: str) -> Observed:
    status = workload.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    restarts, nodes = _pod_summary(pods)
    return Observed(
        phase=JobPhase.RUNNING if ready > 0 else JobPhase.SCHEDULING,
        current_nodes=int((workload.get("spec") or {}).get("replicas") or 0),
        ready_nodes=ready,
        restarts=restarts,
        allocated_nodes=nodes,
        endpoint=status.get("endpoint") or default_endpoint,
    )


def set_condition(
    conditions: list[dict[str, Any]], *, type: str, status: bool, reason: str, message: str, now: datetime
) -> list[dict[str, Any]]:
    """Upsert a condition; its lastTransitionTime moves only when its status changes."""
    value = "True" if status else "False"
    out = [dict(c) for c in conditions]
    for cond in out:
        if cond["type"] == type:
            if cond["status"] != value:
                cond["lastTransitionTime"] = now.isoformat()
            cond.update(status=value, reason=reason, message=message)
            return out
    out.append(
        {"type": type, "status": value, "reason": reason, "message": message, "lastTransitionTime": now.isoformat()}
    )
    return out
