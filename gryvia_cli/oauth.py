"""Signing in with OAuth 2.0: the device authorization grant (RFC 8628) and token revocation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from .client import Client, token_set
from .errors import CliError, ConnectionFailed

DEVICE_CLIENT_ID = "gryvia-cli-device"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEFAULT_SCOPE = "openid read write"
DEFAULT_INTERVAL_S = 5.0
SLOW_DOWN_S = 5.0


def _describe(answer: dict[str, Any], status: int) -> str:
    error = answer.get("error_description") or answer.get("error")
    return str(error) if error else f"HTTP {status}"


def device_login(
    client: Client,
    *,
    out: TextIO,
    client_id: str = DEVICE_CLIENT_ID,
    scope: str = DEFAULT_SCOPE,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Run the device flow: show where to approve, poll until approved; returns the token set to store."""
    status, grant = client.oauth_post("/o/device-authorization/", {"client_id": client_id, "scope": scope})
    if status != 200 or not grant.get("device_code") or not grant.get("user_code"):
        raise CliError(f"{client.url} did not start a device sign-in: {_describe(grant, status)}")
    uri = grant.get("verification_uri") or f"{client.url}/o/device/"
    print(f"To sign in, open {uri} and enter the code: {grant['user_code']}", file=out)
    if grant.get("verification_uri_complete"):
        print(f"(or open {grant['verification_uri_complete']})", file=out)
    print("Waiting for approval...", file=out, flush=True)
    interval = max(float(grant.get("interval") or DEFAULT_INTERVAL_S), 0.0)
    deadline = clock() + float(grant.get("expires_in") or 600)
    form = {"grant_type": DEVICE_GRANT, "device_code": grant["device_code"], "client_id": client_id}
    expired = CliError("the code expired before it was approved; run `gryvia login --device` again")
    while True:
        if clock() >= deadline:
            raise expired
        sleep(interval)
        status, answer = client.oauth_post("/o/token/", form)
        if status == 200 and answer.get("access_token"):
            return token_set(answer, client_id)
        error = answer.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += SLOW_DOWN_S
            continue
        if error == "access_denied":
            raise CliError("the sign-in was denied")
        if error == "expired_token":
            raise expired
        raise CliError(f"sign-in failed: {_describe(answer, status)}")


def revoke(client: Client, tokens: dict[str, Any]) -> bool:
    """Best effort: ask the provider to revoke the refresh and access tokens. True when it accepted both."""
    ok = True
    for kind in ("refresh_token", "access_token"):
        if not tokens.get(kind):
            continue
        form = {"token": tokens[kind], "token_type_hint": kind, "client_id": tokens.get("client_id", DEVICE_CLIENT_ID)}
        try:
            status, _ = client.oauth_post("/o/revoke_token/", form)
        except ConnectionFailed:
            return False
        ok = ok and status == 200
    return ok
