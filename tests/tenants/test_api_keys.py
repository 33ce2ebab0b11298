"""API keys: format, scopes, revocation, expiry, rotation, and that no secret is ever stored or logged."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from apps.core.principal import Refusal
from apps.tenants.keys import KEY_PATTERN
from apps.tenants.models import ApiKey
from tests.factories import client_for, make_key

pytestmark = pytest.mark.django_db


def _create(client, **body):
    response = client.post("/api/v1/api-keys/", {"scopes": ["jobs:read"], **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_created_key_has_the_documented_format_and_is_shown_once(client_a):
    body = _create(client_a, name="ci", scopes=["jobs:read", "jobs:write"])
    match = KEY_PATTERN.match(body["key"])
    assert match and match["key_id"] == body["id"] and len(match["secret"]) >= 32
    assert 8 <= len(body["id"]) <= 16
    again = client_a.get(f"/api/v1/api-keys/{body['id']}/").json()
    assert "key" not in again and again["scopes"] == ["jobs:read", "jobs:write"]
    # The new key works, within its scopes only.
    assert client_for(body["key"]).get("/api/v1/api-keys/").status_code == 403
    assert client_for(body["key"]).get("/api/v1/tenants/alpha/").status_code == 200


def test_jobs_read_key_cannot_create_a_key(tenant_a):
    response = client_for(make_key(tenant_a, ["jobs:read"])).post(
        "/api/v1/api-keys/", {"scopes": ["jobs:read"]}, format="json"
    )
    assert response.status_code == 403


def test_a_key_cannot_mint_more_scopes_than_it_has(tenant_a):
    client = client_for(make_key(tenant_a, ["keys:write", "jobs:read"]))
    ok = client.post("/api/v1/api-keys/", {"scopes": ["jobs:read", "keys:read"]}, format="json")
    assert ok.status_code == 201, ok.content
    for scopes in (["jobs:write"], ["admin"], ["keys:write", "billing:read"], ["llm:invoke"]):
        response = client.post("/api/v1/api-keys/", {"scopes": scopes}, format="json")
        assert response.status_code == 403, scopes
        assert "lacks" in response.json()["error"]["message"]
    assert ApiKey.all_tenants.filter(tenant=tenant_a).count() == 2


def test_only_platform_staff_mint_platform_keys(client_a, tenant_a, tenant_b, platform_key):
    assert (
        client_a.post("/api/v1/api-keys/", {"scopes": ["admin"], "is_platform": True}, format="json").status_code == 403
    )
    staff = client_for(platform_key, HTTP_X_GRYVIA_TENANT="bravo")
    response = staff.post("/api/v1/api-keys/", {"scopes": ["jobs:read"], "is_platform": True}, format="json")
    assert response.status_code == 201, response.content
    # A platform key sees keys of every tenant.
    listed = {k["tenant"] for k in client_for(platform_key).get("/api/v1/api-keys/?limit=100").json()["results"]}
    assert {"alpha", "bravo"} <= listed


def test_unknown_scope_is_400_naming_it(client_a):
    response = client_a.post("/api/v1/api-keys/", {"scopes": ["jobs:read", "jobs:destroy"]}, format="json")
    assert response.status_code == 400
    assert "scopes" in response.json()["error"]["fields"]


def test_revoked_key_fails(client_a):
    body = _create(client_a)
    new = client_for(body["key"])
    assert new.get("/api/v1/tenants/").status_code == 200
    assert client_a.delete(f"/api/v1/api-keys/{body['id']}/").status_code == 204
    assert new.get("/api/v1/tenants/").status_code == 401
    assert client_a.get(f"/api/v1/api-keys/{body['id']}/").json()["state"] == "revoked"


def test_expired_key_fails(client_a):
    soon = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    body = _create(client_a, expires_at=soon)
    new = client_for(body["key"])
    assert new.get("/api/v1/tenants/").status_code == 200
    ApiKey.all_tenants.filter(key_id=body["id"]).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert new.get("/api/v1/tenants/").status_code == 401
    past = (timezone.now() - dt.timedelta(hours=1)).isoformat()
    assert (
        client_a.post("/api/v1/api-keys/", {"scopes": ["jobs:read"], "expires_at": past}, format="json").status_code
        == 400
    )


def test_rotation_keeps_the_old_secret_only_for_the_grace_window(client_a):
    body = _create(client_a)
    old = client_for(body["key"])
    rotated = client_a.post(f"/api/v1/api-keys/{body['id']}/rotate/", {"grace_seconds": 600}, format="json")
    assert rotated.status_code == 200, rotated.content
    new_key = rotated.json()["key"]
    assert new_key != body["key"] and rotated.json()["id"] == body["id"]
    assert old.get("/api/v1/tenants/").status_code == 200  # within the grace window
    assert client_for(new_key).get("/api/v1/tenants/").status_code == 200
    # The window ends.
    ApiKey.all_tenants.filter(key_id=body["id"]).update(previous_valid_until=timezone.now() - dt.timedelta(seconds=1))
    assert old.get("/api/v1/tenants/").status_code == 401
    assert client_for(new_key).get("/api/v1/tenants/").status_code == 200


def test_rotation_without_grace_stops_the_old_secret_at_once(client_a):
    body = _create(client_a)
    rotated = client_a.post(f"/api/v1/api-keys/{body['id']}/rotate/", {"grace_seconds": 0}, format="json").json()
    assert client_for(body["key"]).get("/api/v1/tenants/").status_code == 401
    assert client_for(rotated["key"]).get("/api/v1/tenants/").status_code == 200


def test_last_used_is_recorded_at_most_once_a_minute(tenant_a):
    plaintext = make_key(tenant_a, ["keys:read"])
    client = client_for(plaintext)
    client.get("/api/v1/api-keys/")
    key = ApiKey.all_tenants.get(key_id=plaintext.split("_")[1])
    first = key.last_used_at
    assert first is not None
    client.get("/api/v1/api-keys/")
    key.refresh_from_db()
    assert key.last_used_at == first


def _database_bytes() -> bytes:
    """Everything the database holds: the SQLite file with its WAL, or every PostgreSQL row as text."""
    if connection.vendor == "sqlite":
        name = Path(connection.settings_dict["NAME"])
        parts = [p for p in (name, Path(f"{name}-wal"), Path(f"{name}-shm"), Path(f"{name}-journal")) if p.exists()]
        assert parts, "the test database must be a file"
        return b"".join(p.read_bytes() for p in parts)
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT row_to_json(t)::text FROM "{table}" t')
            chunks.extend(row[0].encode() for row in cursor.fetchall())
    return b"\n".join(chunks)


@pytest.mark.django_db(transaction=True)
def test_no_secret_is_stored_or_logged(caplog, tenant_a):
    caplog.set_level(logging.DEBUG)
    admin = client_for(make_key(tenant_a, ["admin"]))
    created = _create(admin, name="grep-me")
    rotated = admin.post(f"/api/v1/api-keys/{created['id']}/rotate/", {"grace_seconds": 60}, format="json").json()
    for plaintext in (created["key"], rotated["key"]):
        assert client_for(plaintext).get("/api/v1/tenants/").status_code == 200
    client_for(created["key"] + "x").get("/api/v1/tenants/")  # a failed attempt is logged without the key
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone()[0] == "wal"
        assert Path(f"{connection.settings_dict['NAME']}-wal").exists()
    stored = _database_bytes()  # with SQLite's write-ahead log as it is now...
    connection.close()
    stored += _database_bytes()  # ...and after the checkpoint that closing the connection runs
    assert b"grep-me" in stored  # the grep does see the rows
    for plaintext in (created["key"], rotated["key"]):
        secret = plaintext.rsplit("_", 1)[1]
        assert secret.encode() not in stored
        assert secret not in caplog.text


def test_bound_keys_replace_earlier_ones_at_once_or_when_the_caller_revokes_keeping_the_new(tenant_a):
    from apps.tenants.services import api_key_authenticate, api_key_revoke_bound, api_keys_issue_bound

    def works(raw: str) -> bool:
        return not isinstance(api_key_authenticate(raw_key=raw), Refusal)

    first = api_keys_issue_bound([(tenant_a, "job:x", ["jobs:report"], "x")])["job:x"]
    second = api_keys_issue_bound([(tenant_a, "job:x", ["jobs:report"], "x")])["job:x"]
    assert not works(first) and works(second)

    third = api_keys_issue_bound([(tenant_a, "job:x", ["jobs:report"], "x")], revoke_earlier=False)["job:x"]
    assert works(second)  # until the caller revokes it
    kept = KEY_PATTERN.match(third)["key_id"]
    assert api_key_revoke_bound(bound_to=["job:x", "job:other"], keep=[kept]) == 1
    assert not works(second) and works(third)
    assert api_key_revoke_bound(bound_to="job:x") == 1 and not works(third)
    assert ApiKey.all_tenants.filter(bound_to="job:x", revoked_at__isnull=True).count() == 0
