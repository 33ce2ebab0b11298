"""Reports to the control plane: `POST /api/v1/jobs/{name}/checkpoints/` with the job's own bearer token."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from .files import REPORT_BACKOFF_S, REPORT_RETRIES, REPORT_TIMEOUT_S, log


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
