"""Reports to the control plane: `POST /api/v1/jobs/{name}/checkpoints/` with the job's own bearer token."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from .files import PROGRESS_INTERVAL_S, REPORT_BACKOFF_S, REPORT_RETRIES, REPORT_TIMEOUT_S, log


def post_report(url: str, *, token: str, step: int, committed: bool) -> bool:
    """POST {"step", "committed"}: 5 s timeout, 2 retries with backoff (none for 4xx other than 408/429).

    Failures are logged, never raised: a report must never crash training. True when the control plane accepted it.
    """
    body = json.dumps({"step": int(step), "committed": bool(committed)}).encode()
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": "gryvia-trainer/0.1",
    }
    error = "unknown error"
    for attempt in range(REPORT_RETRIES + 1):
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=REPORT_TIMEOUT_S) as response:
                response.read()
            return True
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code} {exc.reason}"
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                break  # our fault: retrying will not help
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        if attempt < REPORT_RETRIES:
            time.sleep(REPORT_BACKOFF_S * 2**attempt)
    log(f"could not report step {step} (committed={bool(committed)}) to {url}: {error}")
    return False


class ProgressReporter:
    """Progress reports of one rank, at most once every PROGRESS_INTERVAL_S (10 s), one in flight at a time."""

    def __init__(self, send: Callable[[int], bool]) -> None:
        self._send = send
        self._last: float | None = None
        self._thread: threading.Thread | None = None

    def report(self, step: int, *, block: bool = False) -> bool:
        """Send `step` now (`block`) or in a background thread; False when too soon or one is still in flight."""
        now = time.monotonic()
        if self._last is not None and now - self._last < PROGRESS_INTERVAL_S:
            return False
        if self._thread is not None and self._thread.is_alive():
            return False
        self._last = now
        if block:
            return self._send(step)
        self._thread = threading.Thread(target=self._send, args=(step,), name="gryvia-progress-report", daemon=True)
        self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Join a report still in flight."""
        if self._thread is not None:
            self._thread.join(timeout)
