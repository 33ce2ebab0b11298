"""A job's logs: every node index merged, each line prefixed `[<index>] `; `follow` streams as they come.

Pods come from the cluster backend (one per index and attempt); the same code serves Kubernetes (pod logs API)
and the local backend (log files). Following is an async generator, so under ASGI it streams chunk by chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async

from apps.cluster.services import POD, NotFoundError, get_backend
from apps.core.scoping import tenant_scope

from . import choices as C
from .models import Job

FOLLOW_POLL_S = 0.5
FOLLOW_MAX_S = 6 * 3600


def _pod_key(pod: dict[str, Any]) -> tuple[int, int, str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return (
        int(labels.get(C.INDEX_LABEL) or labels.get("apps.kubernetes.io/pod-index") or 0),
        int(labels.get(C.ATTEMPT_LABEL) or 0),
        pod["metadata"]["name"],
    )


def job_pods(job: Job, *, index: int | None = None) -> list[dict[str, Any]]:
    pods = get_backend().list(POD, label_selector=f"{C.JOB_UID_LABEL}={job.uid}", namespace=job.tenant.namespace)
    pods = sorted(pods, key=_pod_key)
    if index is not None:
        pods = [p for p in pods if _pod_key(p)[0] == index]
    return pods


def _read(job: Job, pod: dict[str, Any], tail: int | None) -> list[str]:
    try:
        text = get_backend().pod_logs(namespace=job.tenant.namespace, pod=pod["metadata"]["name"], tail_lines=tail)
    except NotFoundError:
        return []
    return text.splitlines()


def job_logs(job: Job, *, index: int | None = None, tail: int | None = None) -> str:
    """Every pod's log (all attempts, in index order), each line prefixed with its index; `tail` lines per index."""
    by_index: dict[int, list[str]] = {}
    for pod in job_pods(job, index=index):
        by_index.setdefault(_pod_key(pod)[0], []).extend(_read(job, pod, None))
    out = []
    for i, lines in sorted(by_index.items()):
        out.extend(f"[{i}] {line}\n" for line in (lines[-tail:] if tail else lines))
    return "".join(out)


async def follow_job_logs(job: Job, *, index: int | None = None, tail: int | None = None) -> AsyncIterator[str]:
    """Yield new lines of every pod (new attempts included) until the job is finished and its pods are drained."""
    seen: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FOLLOW_MAX_S
    first = True
    while loop.time() < deadline:
        pods = await sync_to_async(job_pods, thread_sensitive=False)(job, index=index)
        chunks = []
        for pod in pods:
            name = pod["metadata"]["name"]
            lines = await sync_to_async(_read, thread_sensitive=False)(job, pod, None)
            start = seen.get(name, 0)
            if first and tail:
                start = max(len(lines) - tail, 0)
            if len(lines) > start:
                chunks.append("".join(f"[{_pod_key(pod)[0]}] {line}\n" for line in lines[start:]))
                seen[name] = len(lines)
        first = False
        if chunks:
            yield "".join(chunks)
        # On the request's own sync thread, whose database connection Django closes after the request (a pool
        # thread's connection would stay open).
        finished = await sync_to_async(_finished)(job)
        running = any((p.get("status") or {}).get("phase") in ("Pending", "Running") for p in pods)
        if finished and not running:
            # One more read after the pods ended, so nothing written in their last moments is lost.
            if not chunks:
                return
            continue
        await asyncio.sleep(FOLLOW_POLL_S)


def _finished(job: Job) -> bool:
    with tenant_scope(job.tenant_id):
        now = Job.objects.filter(pk=job.pk).only("phase").first()
    return now is None or now.phase in C.TERMINAL_PHASES
