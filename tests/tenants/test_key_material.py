"""apps.tenants.keys: key ids and secrets drawn in bulk look like those drawn one at a time."""

from __future__ import annotations

from apps.tenants import keys


def test_bulk_key_material_has_the_lengths_and_alphabet_of_single_keys():
    pairs = keys.new_key_ids_and_secrets(50)
    assert len(pairs) == 50 and keys.new_key_ids_and_secrets(0) == []
    single = (keys.new_key_id(), keys.new_secret())
    for key_id, secret in [*pairs, single]:
        assert (len(key_id), len(secret)) == (keys.KEY_ID_LENGTH, keys.SECRET_LENGTH)
        assert keys.parse_key(keys.format_key(key_id, secret)) == (key_id, secret)
    assert len({key_id for key_id, _ in pairs}) == 50 and len({secret for _, secret in pairs}) == 50
    letters = "".join(key_id + secret for key_id, secret in keys.new_key_ids_and_secrets(400))
    assert set(letters) == set(keys._ALPHABET)  # every letter of the alphabet turns up, none other
