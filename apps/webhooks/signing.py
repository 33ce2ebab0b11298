"""Standard Webhooks signatures (https://www.standardwebhooks.com/): pure functions, no I/O.

`webhook-signature: v1,<base64 HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>">`, keyed with the
decoded bytes of the `whsec_` secret. Several signatures are separated by spaces (the new and the old secret
during a rotation); a receiver accepts the request when any one verifies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "whsec_"
SECRET_BYTES = 32  # the specification asks for 24 to 64


def secret_generate() -> str:
    """A new endpoint secret: `whsec_` + base64 of 32 random bytes."""
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a secret stands for (its decoded bytes)."""
    return base64.b64decode(secret.removeprefix(PREFIX))


def signature(secret: str, *, message_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64>` signature."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secrets_: list[str], *, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with each secret in `secrets_` (current first)."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(s, message_id=message_id, timestamp=timestamp, body=body) for s in secrets_
        ),
    }
