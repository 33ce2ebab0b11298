"""What the restart tests share: a checkpointing job, processes started in their own session and stopped by signal,
and the waits between (tests/jobs/test_restarts.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apps.cluster.backends.local.pods import group_alive

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

# Counts 30 steps of 0.25 s, resuming from the step its checkpoint file names; each attempt appends its pid and the
# step it started at to /data/attempts (on the job's volume: under the data dir on the local backend).
STEP_SCRIPT = """
import os, time
d = os.environ["GRYVIA_CHECKPOINT_DIR"]
os.makedirs(d, exist_ok=True)
latest = os.path.join(d, "LATEST")
step = int(open(latest).read()) if os.path.exists(latest) else 0
with open(os.path.join(os.path.dirname(d), "attempts"), "a") as f:
    f.write(f"{os.getpid()} {step}\\n")
print("starting at step", step, flush=True)
while step < 30:
    time.sleep(0.25)
    step += 1
    open(latest + ".tmp", "w").write(str(step))
    os.replace(latest + ".tmp", latest)
print("done at step", step, flush=True)
"""


def checkpointing_job(name: str, *, retry_limit: int, timeout: str = "120s") -> dict[str, Any]:
    """The manifest of a one-pod training job that resumes from its checkpoint."""
    return {
        "apiVersion": "gryvia.io/v1alpha1",
        "kind": "GryviaAIJob",
        "metadata": {"name": name},
        "spec": {
            "type": "training",
            "image": "python:3.11-slim",
            "gpus": 0,
            "timeout": timeout,
            "retryLimit": retry_limit,
            "storage": "standard",
            "checkpoint": {"dir": "/data/checkpoints", "preStopGraceSeconds": 5},
            "command": ["python3", "-c", STEP_SCRIPT],
        },
    }


def attempts(data_dir: Path, namespace: str) -> list[tuple[int, int]]:
    """(pid, starting step) of each attempt the job's volume recorded."""
    found = sorted((data_dir / "volumes" / namespace).glob("*/attempts"))
    if not found:
        return []
    return [(int(p), int(s)) for p, s in (line.split() for line in found[0].read_text().splitlines() if line)]


def latest_step(data_dir: Path, namespace: str) -> int:
    """The step the job's checkpoint names (0 before its first)."""
    found = sorted((data_dir / "volumes" / namespace).glob("*/checkpoints/LATEST"))
    try:
        return int(found[0].read_text() or 0) if found else 0
    except (OSError, ValueError):
        return 0


def processes_in(data_dir: Path) -> dict[int, str]:
    """pid -> command line of every live process whose working directory is under `data_dir` (the pods of the
    local backend of that installation: jobs and model runtimes)."""
    found = {}
    root = str(data_dir.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            if cwd == root or cwd.startswith(root + "/"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(argv: list[str], *, env: dict[str, str], log: Path) -> subprocess.Popen:
    """A Gryvia process (server, worker, beat) in a session of its own, its output to `log`."""
    handle = open(log, "ab")  # noqa: SIM115 - the child keeps it
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, sig: int, *, timeout: float = 60.0) -> None:
    """Send `sig` to the process alone (as a process manager would) and wait for it to exit."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise AssertionError(f"{proc.args[:4]} did not stop within {timeout}s of signal {sig}") from None


def kill_session(proc: subprocess.Popen) -> None:
    """Test teardown: nothing the process or its children started survives the test."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(10)


def wait_for(
    what: str, check: Callable[[], Any], *, timeout: float = 60.0, every: float = 0.25, log: Path | None = None
):
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n{tail}")


def gone(pids: list[int], timeout: float = 10.0) -> bool:
    """Whether none of these processes (and their groups) lives, waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(group_alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False
