"""One local pod's process: started from a LaunchPlan (env.py), watched, and stopped.

A pod is one process group (`start_new_session=True`). When its main process exits, whatever is left of the group
is killed, as a container's processes die with it. When the thread that started it ends (with its process, however
that process dies), the main process gets SIGKILL (node.die_with_parent). `terminate()` is the termination
sequence: an optional checkpoint request (request file + SIGUSR1) and grace, SIGTERM, a short wait, SIGKILL; it
returns only when no process of the group is alive.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apps.cluster.gpus import gpu_allocator

from .env import LOOPBACK, LaunchPlan
from .node import die_with_parent

logger = logging.getLogger(__name__)

SIGTERM_WAIT_S = 5.0  # after SIGTERM, before SIGKILL (module attribute: tests shorten it)
KILL_CONFIRM_S = 5.0


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's pick for port 0 on the loopback address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def kill_group(pgid: int, sig: int) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still lives. Zombies (exited, not yet reaped by their parent) don't count."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc"):
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


class PodProcess:
    """One attempt of one pod: Pending until launched, then a process group until it exits (or is terminated)."""

    def __init__(self, *, name: str, uid: str, index: int, attempt: int, restart_count: int = 0) -> None:
        self.name, self.uid, self.index, self.attempt = name, uid, index, attempt
        self.restart_count = restart_count
        self.last_state: dict[str, Any] | None = None
        self.created_at = now_iso()
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.gpus: list[int] = []
        self.port: int | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.started_at: str | None = None
        self.finished_at: str | None = None
        self.ready = False
        self.append_log = False
        self.stopping = False
        self.stop_reason = ""
        self.after_stop = "keep"  # keep | remove | gone: what becomes of the Pod object once terminated
        self.exited = threading.Event()
        self.plan: LaunchPlan | None = None
        self._wake = threading.Event()
        self._hurry = False
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def gpu_owner(self) -> str:
        return f"{self.uid}#{self.restart_count}"

    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def finished(self) -> bool:
        return self.exited.is_set()

    @property
    def alive(self) -> bool:
        return self.started and not self.finished

    def launch(
        self,
        plan: LaunchPlan,
        *,
        append: bool,
        on_exit: Callable[[PodProcess], None],
        spawn: Callable[[Callable[[], None], str], None],
    ) -> None:
        """Start the process group (logs to `plan.log_path`) and a thread that waits for it; start errors count as
        an exit with code 127 (126 when not executable)."""
        self.plan = plan
        plan.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(plan.log_path, "ab" if append else "wb") as log:
            try:
                if not plan.argv:
                    raise FileNotFoundError("no command: the local backend cannot run an image's own entrypoint")
                self._proc = subprocess.Popen(  # noqa: S603 - the job's own command, run as the job asked
                    plan.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=plan.env,
                    cwd=plan.cwd,
                    start_new_session=True,
                    preexec_fn=die_with_parent(),  # noqa: PLW1509 - a resolved libc call only (node.py)
                )
            except OSError as exc:
                log.write(f"gryvia-local: cannot start {plan.argv[:1]}: {exc}\n".encode())
                self.started_at = now_iso()
                self.reason = "StartError"
                self._finish(126 if isinstance(exc, PermissionError) else 127)
                on_exit(self)
                return
        self.pid = self._proc.pid
        self.started_at = now_iso()
        self.phase = "Running"
        spawn(lambda: self._wait(on_exit), f"gryvia-pod-{self.name}")

    def _wait(self, on_exit: Callable[[PodProcess], None]) -> None:
        assert self._proc is not None
        code = self._proc.wait()
        assert self.pid is not None
        kill_group(self.pid, signal.SIGKILL)  # a container's processes die with its main process
        deadline = time.monotonic() + KILL_CONFIRM_S
        while group_alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._finish(code if code >= 0 else 128 - code)
        on_exit(self)

    def _finish(self, code: int) -> None:
        self.exit_code = code
        self.finished_at = now_iso()
        self.phase = "Succeeded" if code == 0 and not self.stopping else "Failed"
        self.ready = False
        gpu_allocator().release(self.gpu_owner)
        for path in self.plan.scratch if self.plan else []:
            _remove_tree(path)
        self.exited.set()
        self._wake.set()

    def cancel_pending(self, reason: str) -> None:
        """A pod that never started is simply marked Failed."""
        self.stopping, self.stop_reason = True, reason
        gpu_allocator().release(self.gpu_owner)
        self.phase, self.finished_at = "Failed", now_iso()
        self.exited.set()

    def hurry(self) -> None:
        """Cut every remaining grace short: the sequence goes straight on to SIGKILL."""
        self._hurry = True
        self._wake.set()

    def _sleep(self, seconds: float) -> bool:
        """Wait up to `seconds` for the exit; True when the process has exited. Interrupted by `hurry()`."""
        deadline = time.monotonic() + seconds
        while not self.exited.is_set() and not self._hurry:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wake.wait(left)
        return self.exited.is_set()

    def terminate(self, grace: float) -> None:
        """The termination sequence (run it on a background thread): checkpoint request + SIGUSR1 and up to `grace`
        when the pod checkpoints, SIGTERM and up to min(SIGTERM_WAIT_S, grace), then SIGKILL (at once when `grace`
        is 0 or `hurry()` was called); returns once no process of the group is alive."""
        if not self.started or self.pid is None:
            return
        pgid = self.pid
        plan = self.plan
        if grace > 0 and plan is not None and plan.checkpointing and not self.finished:
            if plan.checkpoint_file:
                _write_request(Path(plan.checkpoint_file), self.stop_reason, grace)
            kill_group(pgid, signal.SIGUSR1)
            if self._sleep(grace):
                return
        if grace > 0 and not self.finished:
            kill_group(pgid, signal.SIGTERM)
            if self._sleep(min(SIGTERM_WAIT_S, grace)):
                return
        if not self.finished:
            kill_group(pgid, signal.SIGKILL)
        if not self.exited.wait(KILL_CONFIRM_S + 5):
            logger.error("pod %s: process group %s survived SIGKILL", self.name, pgid)


def _write_request(path: Path, reason: str, grace: float) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps({"reason": reason or "Terminating", "requestedAt": now_iso(), "graceSeconds": grace})
        )
    except OSError as exc:
        logger.warning("cannot write checkpoint request %s: %s", path, exc)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
