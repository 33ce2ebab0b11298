"""apps.core.crypto: secrets stored encrypted, readable after a key rotation, refused with a foreign key."""

from __future__ import annotations

import pytest

from apps.core import crypto


def test_round_trip_and_every_token_differs():
    first, second = crypto.encrypt("sk-upstream-123"), crypto.encrypt("sk-upstream-123")
    assert first != second and "sk-upstream-123" not in first
    assert crypto.decrypt(first) == crypto.decrypt(second) == "sk-upstream-123"
    assert crypto.encrypt("") == "" and crypto.decrypt("") == ""


def test_previous_keys_still_decrypt_after_a_rotation(settings):
    settings.GRYVIA_ENCRYPTION_KEY = "old-" + "k" * 60
    token = crypto.encrypt("sk-kept")
    settings.GRYVIA_ENCRYPTION_KEY = "new-" + "n" * 60
    with pytest.raises(crypto.SecretUnreadable, match="GRYVIA_ENCRYPTION_KEY"):
        crypto.decrypt(token)
    settings.GRYVIA_ENCRYPTION_KEYS_PREVIOUS = ["old-" + "k" * 60]
    assert crypto.decrypt(token) == "sk-kept"
    fresh = crypto.encrypt("sk-new")
    settings.GRYVIA_ENCRYPTION_KEYS_PREVIOUS = []
    assert crypto.decrypt(fresh) == "sk-new"  # new values use the current key
