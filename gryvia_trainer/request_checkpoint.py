"""The preStop hook of jobs with a checkpoint contract: `python3 -m gryvia_trainer.request_checkpoint [--timeout S]`.

Writes the checkpoint request file (GRYVIA_CHECKPOINT_REQUEST_FILE, else `<GRYVIA_CHECKPOINT_DIR>/.checkpoint-request`)
and waits up to `--timeout` seconds (default 55) for rank 0's acknowledgement, `<request file>.ack`, which holds the
committed step. Always exits 0: a hook that fails would only delay the pod's termination.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

from .checkpoint import ack_path, atomic_write, request_file_from_env

DEFAULT_TIMEOUT_S = 55.0


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def request_checkpoint(
    request_file: Path, *, timeout: float = DEFAULT_TIMEOUT_S, poll_interval: float = 0.2
) -> int | None:
    """Write the request and wait for a fresh acknowledgement; the committed step, or None on timeout."""
    ack = ack_path(request_file)
    before = _signature(ack)  # an ack left by an earlier request does not count
    request_file.parent.mkdir(parents=True, exist_ok=True)
    body = f"requested at {time.time():.3f} by {socket.gethostname()} pid {os.getpid()}\n"
    atomic_write(request_file, body.encode())
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        current = _signature(ack)
        if current is not None and current != before:
            try:
                return int(ack.read_text().strip())
            except (OSError, ValueError):
                pass  # replaced again under us, or not ours: keep waiting
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m gryvia_trainer.request_checkpoint",
        description="Ask the job's training processes for a checkpoint and wait until rank 0 commits it.",
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for the acknowledgement"
    )
    parser.add_argument("--request-file", help="default: $GRYVIA_CHECKPOINT_REQUEST_FILE")
    args = parser.parse_args(argv)
    request_file = Path(args.request_file) if args.request_file else request_file_from_env()
    if request_file is None:
        print("request_checkpoint: no GRYVIA_CHECKPOINT_REQUEST_FILE or GRYVIA_CHECKPOINT_DIR; nothing to do")
        return 0
    print(f"request_checkpoint: requesting a checkpoint via {request_file} (waiting up to {args.timeout:g}s)")
    sys.stdout.flush()
    try:
        step = request_checkpoint(request_file, timeout=args.timeout)
    except OSError as exc:
        print(f"request_checkpoint: could not write {request_file}: {exc}")
        return 0
    if step is None:
        print(f"request_checkpoint: no acknowledgement within {args.timeout:g}s; stopping without one")
    else:
        print(f"request_checkpoint: checkpoint committed at step {step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
