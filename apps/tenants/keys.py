"""API key material: format `gry_<key_id>_<secret>`, generation and the peppered digest."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string

from django.conf import settings

KEY_ID_LENGTH = 12
SECRET_LENGTH = 40
_ALPHABET = string.ascii_letters + string.digits
KEY_PATTERN = re.compile(r"^gry_(?P<key_id>[A-Za-z0-9]{8,16})_(?P<secret>[A-Za-z0-9]{32,})$")


def _random(length: int) -> str:
    """`length` characters drawn uniformly from the 62-letter alphabet (bytes >= 248 are dropped: 248 = 4 x 62)."""
    out: list[str] = []
    while len(out) < length:
        out += [_ALPHABET[b % 62] for b in secrets.token_bytes(length + 8) if b < 248]
    return "".join(out[:length])


def new_key_id() -> str:
    return _random(KEY_ID_LENGTH)


def new_secret() -> str:
    return _random(SECRET_LENGTH)


def new_key_ids_and_secrets(count: int) -> list[tuple[str, str]]:
    """`count` (key id, secret) pairs, as `new_key_id()` and `new_secret()` draw them, from one read of the system's
    random source for all of them (a reconcile pass issues dozens of keys)."""
    size = KEY_ID_LENGTH + SECRET_LENGTH
    letters = [_ALPHABET[b % 62] for b in secrets.token_bytes((size + 8) * count) if b < 248]
    while len(letters) < size * count:
        letters += [_ALPHABET[b % 62] for b in secrets.token_bytes(size + 8) if b < 248]
    text = "".join(letters)
    return [(text[i : i + KEY_ID_LENGTH], text[i + KEY_ID_LENGTH : i + size]) for i in range(0, size * count, size)]


def format_key(key_id: str, secret: str) -> str:
    return f"gry_{key_id}_{secret}"


def parse_key(raw: str) -> tuple[str, str] | None:
    match = KEY_PATTERN.match(raw)
    if match is None:
        return None
    return match["key_id"], match["secret"]


def digest(secret: str) -> str:
    """HMAC-SHA256 of the secret keyed by the server pepper (hex)."""
    return hmac.new(settings.GRYVIA_API_KEY_PEPPER.encode(), secret.encode(), hashlib.sha256).hexdigest()


def digest_matches(secret: str, stored: str) -> bool:
    return bool(stored) and hmac.compare_digest(digest(secret), stored)
