"""File-level building blocks of checkpoints: environment names, atomic writes, request and ack files.

Standard library only (see gryvia_trainer.checkpoint for the protocol).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

ENV_DIR = "GRYVIA_CHECKPOINT_DIR"
ENV_REQUEST_FILE = "GRYVIA_CHECKPOINT_REQUEST_FILE"
ENV_INTERVAL = "GRYVIA_CHECKPOINT_INTERVAL"
ENV_RESUME = "GRYVIA_RESUME_IF_PRESENT"
ENV_API_URL = "GRYVIA_API_URL"
ENV_JOB_TOKEN = "GRYVIA_JOB_TOKEN"
ENV_JOB_NAME = "GRYVIA_JOB_NAME"

REQUEST_FILE_NAME = ".checkpoint-request"
LATEST_FILE = "LATEST"
COMMITTED_FILE = "COMMITTED"
TMP_PREFIX = ".tmp-"
REPORT_TIMEOUT_S = 5.0
REPORT_RETRIES = 2
REPORT_BACKOFF_S = 0.5
PROGRESS_INTERVAL_S = 10.0
DEFAULT_BARRIER_TIMEOUT_S = 600.0

State = bytes | bytearray | memoryview | Callable[[BinaryIO], None]


def log(message: str) -> None:
    """Diagnostics go to stderr, which Gryvia collects as the pod's log."""
    print(f"[gryvia_trainer] {message}", file=sys.stderr, flush=True)


def step_dir_name(step: int) -> str:
    return f"step-{int(step):08d}"


def request_file_from_env(environ: dict[str, str] | None = None) -> Path | None:
    """GRYVIA_CHECKPOINT_REQUEST_FILE, else `<GRYVIA_CHECKPOINT_DIR>/.checkpoint-request`, else None."""
    env = os.environ if environ is None else environ
    if env.get(ENV_REQUEST_FILE):
        return Path(env[ENV_REQUEST_FILE])
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR]) / REQUEST_FILE_NAME
    return None


def ack_path(request_file: str | os.PathLike[str]) -> Path:
    """Where rank 0 acknowledges a served request: the request file's name plus `.ack`."""
    path = Path(request_file)
    return path.with_name(path.name + ".ack")


def resume_enabled(environ: dict[str, str] | None = None) -> bool:
    """GRYVIA_RESUME_IF_PRESENT (default true): resume from the latest committed step when there is one."""
    env = os.environ if environ is None else environ
    return env.get(ENV_RESUME, "true").strip().lower() not in ("0", "false", "no", "off")


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or unlink in `path` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: State) -> None:
    """Write `data` (bytes, or a callable given the open binary file) to a temp file next to `path`, flush, fsync,
    rename over `path` and fsync the directory. Readers see the old file or the whole new one, never a part."""
    if not callable(data) and not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"state must be bytes or a callable taking a binary file, not {type(data).__name__}")
    path = Path(path)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
