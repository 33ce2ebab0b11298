"""`get_backend()`: the process-wide cluster backend named by GRYVIA_BACKEND."""

from __future__ import annotations

import threading

from django.conf import settings

from .base import ClusterBackend

_lock = threading.Lock()
_backend: ClusterBackend | None = None


def get_backend() -> ClusterBackend:
    global _backend
    with _lock:
        if _backend is None:
            if settings.GRYVIA_BACKEND == "kubernetes":
                from .kubernetes import KubernetesBackend

                _backend = KubernetesBackend(
                    qps=settings.GRYVIA_KUBE_QPS,
                    burst=settings.GRYVIA_KUBE_BURST,
                    timeout_s=settings.GRYVIA_KUBE_TIMEOUT_S,
                )
            else:
                from .local import LocalBackend

                _backend = LocalBackend(data_dir=settings.DATA_DIR, node=True)  # one node per data dir
        return _backend


def set_backend(backend: ClusterBackend | None) -> None:
    """Replace the process-wide backend (tests, and `serve` shutting down)."""
    global _backend
    with _lock:
        if _backend is not None and backend is not _backend:
            _backend.close()
        _backend = backend


def claim_local_node() -> None:
    """Make this process the installation's local node now, when the backend is `local`: the process that runs the
    reconcilers (`serve` with its ticker, the Celery worker) claims it at start, so a second one is refused at once
    with the running one's pid (NodeBusyError) instead of failing each pass (see local/node.py)."""
    if settings.GRYVIA_BACKEND == "local":
        get_backend().claim()  # type: ignore[attr-defined]
