"""One installation's local node: which process runs its workloads, what it shows the others, what a dead one left.

The local backend runs each pod as a child process group of one process. Several processes share an installation
(one data dir): `make run`'s server alone, or in the production profile the web server and a Celery worker. Exactly
one of them is the node: the process that holds `locks/local-node.lock`, an flock the kernel releases however the
holder dies. The node is claimed by the first write (apply, create, delete); the node then

- publishes its objects to `local-node/objects.json` (at most every PUBLISH_S), so every other process of the
  installation reads the same Pods, workloads and events, and so the same logs (the web server's
  `GET /api/v1/jobs/{name}/logs/` while a worker runs the jobs);
- records each pod's process group under `local-node/groups/`; its pods die with it (PR_SET_PDEATHSIG), and what
  their own children left behind is killed when the next node claims the installation.

Another process reads the published objects while their publisher lives, and writes nothing: its writes are
refused with the node's pid (`NodeBusyError`). A node that stops ends its workloads, so its successor starts from
an empty store and the reconcilers find the jobs whose workloads were lost (see docs/jobs.md).
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..base import ClusterError

logger = logging.getLogger(__name__)

PUBLISH_S = 0.25  # the most often the node rewrites its published objects
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class NodeBusyError(ClusterError):
    """Another process of this installation runs its local workloads."""


def process_identity(pid: int) -> str | None:
    """`<pid>:<start time in clock ticks since boot>` for a live process (None when it is gone): unlike a pid alone
    it is never reused. Where /proc is missing, the pid while the process exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return str(pid)
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields and fields[0] in ("Z", "X"):
        return None
    return f"{pid}:{fields[19]}"


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGKILL when the thread that started it ends (Linux), so a pod never
    outlives the process that runs it, however that process dies. It calls only a function resolved beforehand:
    nothing that could take a lock another thread held at fork time."""
    if _libc is None:
        return None
    prctl, parent = _libc.prctl, os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above: go now
            os._exit(137)

    return preexec


class LocalNode:
    """The claim on one data dir's local node, and what its holder publishes."""

    def __init__(self, data_dir: Path) -> None:
        self.lock_path = data_dir / "locks" / "local-node.lock"
        self.dir = data_dir / "local-node"
        self.objects_path = self.dir / "objects.json"
        self.groups_dir = self.dir / "groups"
        self._fd: int | None = None
        self._mutex = threading.Lock()
        self._read_cache: tuple[int, str, dict[tuple[str, str, str], dict[str, Any]]] | None = None
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None
        self._snapshot: Callable[[], bytes] | None = None

    @property
    def owned(self) -> bool:
        return self._fd is not None

    # -- the claim ------------------------------------------------------------------------------------------------

    def claim(self, snapshot: Callable[[], bytes]) -> None:
        """Become this installation's node (once; a no-op after), or raise NodeBusyError naming the holder. On
        claiming: kill what an earlier node's pods left, and start publishing `snapshot()` (the objects, a JSON
        array) when told they changed."""
        with self._mutex:
            if self._fd is not None:
                return
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                data_dir, pid = self.lock_path.parent.parent, holder.split(":")[0]
                raise NodeBusyError(
                    f"the local backend's workloads run in one process per installation ({data_dir}), and pid {pid} "
                    "runs them: start one `make worker` (or one `make run`), or set GRYVIA_BACKEND=kubernetes to run "
                    "several"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, (process_identity(os.getpid()) or str(os.getpid())).encode(), 0)
            self._fd = fd
            self._snapshot = snapshot
        self.sweep()
        self._publisher = threading.Thread(target=self._publish_loop, name="gryvia-local-node", daemon=True)
        self._publisher.start()

    def release(self) -> None:
        """Stop publishing, withdraw the published objects and give the node up (its workloads have stopped)."""
        with self._mutex:
            if self._fd is None:
                return
            self._stop.set()
            self._dirty.set()
        if self._publisher is not None:
            self._publisher.join(5)
        with self._mutex:
            self.objects_path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    # -- what other processes read ----------------------------------------------------------------------------------

    def changed(self) -> None:
        """The node's objects changed: publish them soon."""
        if self._fd is not None:
            self._dirty.set()

    def _publish_loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                self._write(self._snapshot() if self._snapshot else b"[]")
            except Exception:  # noqa: BLE001 - readers see the previous state; the next change tries again
                logger.exception("local node: cannot publish its objects")
            self._stop.wait(PUBLISH_S)

    def _write(self, objects: bytes) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        node = orjson.dumps(process_identity(os.getpid()))
        body = b'{"node":' + node + b',"objects":' + objects + b"}"
        tmp = self.objects_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(body)
        os.replace(tmp, self.objects_path)

    def published(self) -> dict[tuple[str, str, str], dict[str, Any]] | None:
        """The objects another process's node published, keyed as the store keys them; None when no live node
        published any (the reader then has nothing but what it holds itself)."""
        try:
            stat = self.objects_path.stat()
        except FileNotFoundError:
            return None
        cache = self._read_cache
        if cache is None or cache[0] != stat.st_mtime_ns:
            try:
                document = orjson.loads(self.objects_path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                return None
            objects = {}
            for obj in document.get("objects") or []:
                meta = obj.get("metadata") or {}
                objects[(f"{obj.get('apiVersion')}/{obj.get('kind')}", meta.get("namespace") or "", meta["name"])] = obj
            self._read_cache = cache = (stat.st_mtime_ns, str(document.get("node") or ""), objects)
        node = cache[1]
        if not node or process_identity(int(node.split(":")[0])) != node:
            return None  # its publisher is gone, and its workloads with it
        return cache[2]

    # -- pods' process groups ---------------------------------------------------------------------------------------

    def record_group(self, pgid: int) -> None:
        """A pod's process group started (its leader's identity, so a reused pid is never taken for it)."""
        if self._fd is None:
            return
        self.groups_dir.mkdir(parents=True, exist_ok=True)
        (self.groups_dir / str(pgid)).write_text(process_identity(pgid) or str(pgid))

    def forget_group(self, pgid: int) -> None:
        (self.groups_dir / str(pgid)).unlink(missing_ok=True)

    def sweep(self) -> int:
        """Kill the process groups an earlier node's pods left (a pod's children, after its main process died with
        that node). A group whose leader's pid now names another process is left alone. Returns how many."""
        killed = 0
        for entry in self.groups_dir.glob("*") if self.groups_dir.is_dir() else ():
            try:
                pgid, recorded = int(entry.name), entry.read_text().strip()
            except (ValueError, OSError):
                entry.unlink(missing_ok=True)
                continue
            current = process_identity(pgid)
            if current is None or current == recorded:  # the leader is gone (so the pgid is not reused) or is ours
                try:
                    os.killpg(pgid, signal.SIGKILL)
                    killed += 1
                    logger.warning("local node: killed process group %s left by an earlier node", pgid)
                except (ProcessLookupError, PermissionError):
                    pass
            entry.unlink(missing_ok=True)
        return killed
