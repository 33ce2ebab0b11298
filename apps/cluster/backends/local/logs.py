"""The local backend's pod logs: files under `<data_dir>/logs/<namespace>/<pod>.log`, read whole or followed.

A mixin of `LocalBackend` (backend.py). Any process of an installation reads them; whether a pod has finished (its
log will not grow) comes from the objects this process sees (its own, or those the node publishes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..base import NotFoundError

FINISHED = ("Succeeded", "Failed")  # pod phases after which its log does not grow


class PodLogsMixin:
    _cond: threading.Condition
    _data_dir: Path | None
    _log_dir: Path | None
    log_dir: Path
    _view: Callable[[], dict[tuple[str, str, str], dict[str, Any]]]  # LocalBackend's: the objects this process sees

    def _log_path(self, namespace: str, pod: str) -> Path | None:
        if self._log_dir is None and self._data_dir is None:
            return None
        return self.log_dir / namespace / f"{pod}.log"

    def pod_logs(self, *, namespace: str, pod: str, container: str | None = None, tail_lines: int | None = None) -> str:
        path = self._log_path(namespace, pod)
        if path is None or not path.exists():
            raise NotFoundError(f"no logs for pod {namespace}/{pod}")
        lines = path.read_text(errors="replace").splitlines(keepends=True)
        return "".join(lines[-tail_lines:] if tail_lines else lines)

    def _pod_done(self, namespace: str, pod: str) -> bool:
        """True when the pod has finished or is gone (its log will not grow)."""
        with self._cond:
            obj = self._view().get(("v1/Pod", namespace, pod))
            return obj is None or (obj.get("status") or {}).get("phase") in FINISHED

    def stream_pod_logs(self, *, namespace: str, pod: str, follow: bool, poll_s: float = 0.2) -> Iterator[str]:
        """Lines of the pod's log file; with `follow`, waits (polling every `poll_s`, at least 50 ms) for more
        until the pod has finished and the file is drained. NotFoundError here when there is nothing to read."""
        path = self._log_path(namespace, pod)
        if path is None or (not path.exists() and (not follow or self._pod_done(namespace, pod))):
            raise NotFoundError(f"no logs for pod {namespace}/{pod}")
        return self._follow(path, namespace=namespace, pod=pod, follow=follow, poll_s=max(poll_s, 0.05))

    def _follow(self, path: Path, *, namespace: str, pod: str, follow: bool, poll_s: float) -> Iterator[str]:
        while not path.exists():  # the pod is still Pending
            if self._pod_done(namespace, pod):
                return
            time.sleep(poll_s)
        buffer = b""
        with open(path, "rb") as handle:
            while True:
                finished = not follow or self._pod_done(namespace, pod)
                data = handle.read()
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace") + "\n"
                if finished:
                    break
                if not data:
                    time.sleep(poll_s)
        if buffer:
            yield buffer.decode("utf-8", "replace") + "\n"
