"""Secrets Gryvia must store and use again (an inference service's upstream API key): encrypted at rest.

Fernet (AES-128-CBC + HMAC-SHA256, from `cryptography`) with a key derived by HKDF-SHA256 from the server secret
`GRYVIA_ENCRYPTION_KEY` (the environment, or generated once into the data dir outside production, like the other
server secrets). `GRYVIA_ENCRYPTION_KEYS_PREVIOUS` (comma-separated) still decrypts after a rotation; new values
are always encrypted with the current key. Plaintext never reaches the database, the audit log or a log line.
"""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

_INFO = b"gryvia secrets at rest v1"


class SecretUnreadable(Exception):
    """A stored secret no configured key decrypts (the key was changed without keeping the old one)."""


def _fernet(secret: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret.encode())
    return Fernet(base64.urlsafe_b64encode(key))


@lru_cache(maxsize=4)
def _keys(current: str, previous: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([_fernet(current), *(_fernet(p) for p in previous)])


def _box() -> MultiFernet:
    return _keys(settings.GRYVIA_ENCRYPTION_KEY, tuple(settings.GRYVIA_ENCRYPTION_KEYS_PREVIOUS))


def encrypt(plaintext: str) -> str:
    """The stored form of `plaintext` ("" stays ""): a Fernet token, different every time."""
    if not plaintext:
        return ""
    return _box().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    if not token:
        return ""
    try:
        return _box().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretUnreadable(
            "a stored secret cannot be decrypted with GRYVIA_ENCRYPTION_KEY or GRYVIA_ENCRYPTION_KEYS_PREVIOUS"
        ) from exc
