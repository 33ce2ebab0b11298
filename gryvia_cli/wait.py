"""Waiting for a job: poll its status, show phase transitions with elapsed time, decide the exit status.

On a terminal the progress is one line rewritten in place; otherwise (CI logs, pipes) one plain line per
change of phase or reason.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any, TextIO

from .client import Client, job_path
from .errors import CliError
from .output import clean, duration

TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled", "Rejected"})
FAILED = frozenset({"Failed", "Cancelled", "Rejected"})
DEFAULT_INTERVAL_S = 2.0


def phase_of(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "Pending")


def is_inference(job: dict[str, Any]) -> bool:
    return (job.get("spec") or {}).get("type") == "inference"


def finished(job: dict[str, Any]) -> bool:
    """Done for `submit --wait`: a terminal phase, or an inference job that is serving (Running)."""
    phase = phase_of(job)
    return phase in TERMINAL or (is_inference(job) and phase == "Running")


def stopped(job: dict[str, Any]) -> bool:
    """Done for `cancel --wait`: any terminal phase."""
    return phase_of(job) in TERMINAL


def started(job: dict[str, Any]) -> bool:
    """Ready for following logs: running, or already over."""
    return phase_of(job) == "Running" or phase_of(job) in TERMINAL


class Progress:
    """Shows one job's progress on `stream`."""

    def __init__(
        self,
        stream: TextIO,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        start: float | None = None,
    ) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.clock = clock
        self.start = clock() if start is None else start
        self._last: tuple[str, str, str] | None = None
        self._line_open = False

    def show(self, job: dict[str, Any]) -> None:
        status = job.get("status") or {}
        name = (job.get("metadata") or {}).get("name") or "?"
        phase, reason = phase_of(job), status.get("reason") or ""
        elapsed = duration(self.clock() - self.start)
        detail = ": ".join(clean(part) for part in (reason, status.get("message")) if part)
        if phase == "Running" and status.get("currentNodes"):
            nodes = f"{status.get('readyNodes') or 0}/{status['currentNodes']} nodes ready"
            detail = f"{nodes}; {detail}" if detail else nodes
        text = f"{clean(name)}: {phase} [{elapsed}]" + (f" {detail}" if detail else "")
        if self.tty:
            width = shutil.get_terminal_size((100, 24)).columns - 1
            self.stream.write("\r\x1b[K" + (text if len(text) <= width else text[: width - 3] + "..."))
            self._line_open = True
        elif (name, phase, reason) != self._last:
            self.stream.write(text + "\n")
        self._last = (name, phase, reason)
        self.stream.flush()

    def close(self) -> None:
        """End the in-place line so that later output starts on a fresh one."""
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False


def wait_for(
    client: Client,
    job: dict[str, Any],
    done: Callable[[dict[str, Any]], bool],
    progress: Progress,
    *,
    interval: float = DEFAULT_INTERVAL_S,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll `jobs/{name}/` until `done(job)`; returns the last job object seen."""
    name = (job.get("metadata") or {}).get("name")
    deadline = None if not timeout else progress.clock() + timeout
    try:
        while True:
            progress.show(job)
            if done(job):
                return job
            if deadline is not None and progress.clock() >= deadline:
                raise CliError(
                    f"timed out after {duration(timeout or 0)} waiting for job {name} (phase {phase_of(job)})"
                )
            sleep(interval)
            job = client.get(job_path(str(name)))
    finally:
        progress.close()


def outcome(job: dict[str, Any], stream: TextIO) -> int:
    """The exit status for a job that is done, with a line on `stream` saying how it ended."""
    status = job.get("status") or {}
    name, phase = (job.get("metadata") or {}).get("name"), phase_of(job)
    why = ": ".join(clean(part) for part in (status.get("reason"), status.get("message")) if part)
    if phase in FAILED:
        stream.write(f"job {clean(name)} {phase}" + (f": {why}" if why else "") + "\n")
        return 1
    if phase == "Running" and is_inference(job) and status.get("endpoint"):
        stream.write(f"job {clean(name)} is serving at {clean(status['endpoint'])}\n")
    return 0
