"""A key cannot revoke itself by accident, and the demo key can be printed and rotated (issue 27, items 7 and 11)."""

from __future__ import annotations

import io
import json
import stat

import pytest
from django.core.management import CommandError, call_command

from apps.tenants.models import ApiKey
from tests.factories import client_for

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("how", ["delete", "revoke action"])
def test_a_key_revoking_itself_is_refused_unless_it_says_self_true(key_a, how):
    key_id = key_a.split("_")[1]
    client = client_for(key_a)

    def revoke(query: str = ""):
        if how == "delete":
            return client.delete(f"/api/v1/api-keys/{key_id}/{query}")
        return client.post(f"/api/v1/api-keys/{key_id}/revoke/{query}")

    refused = revoke()
    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["type"] == "conflict" and "?self=true" in error["message"] and key_id in error["message"]
    assert ApiKey.all_tenants.get(key_id=key_id).revoked_at is None
    assert client.get("/api/v1/api-keys/").status_code == 200  # still works
    assert revoke("?self=true").status_code in (200, 204)
    assert ApiKey.all_tenants.get(key_id=key_id).revoked_at is not None
    assert client.get("/api/v1/api-keys/").status_code == 401


def test_another_key_of_the_tenant_revokes_without_the_flag(client_a, tenant_a):
    other = client_a.post("/api/v1/api-keys/", {"scopes": ["jobs:read"]}, format="json").json()
    assert client_a.delete(f"/api/v1/api-keys/{other['id']}/").status_code == 204
    assert client_for(other["key"]).get("/api/v1/jobs/").status_code == 401


def test_rotate_demo_key_stores_and_prints_a_fresh_key_and_revokes_the_old(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    _run("bootstrap")
    path = tmp_path / "demo-credentials.json"
    old = json.loads(path.read_text())
    # The scenario of the issue: the demo key revoked itself; the file holds a dead key.
    old_id = old["api_key_id"]
    assert client_for(old["api_key"]).delete(f"/api/v1/api-keys/{old_id}/?self=true").status_code == 204
    assert _run("bootstrap", "--print-demo-key").strip() == old["api_key"]

    out = _run("bootstrap", "--rotate-demo-key")
    new = json.loads(path.read_text())
    assert new["api_key"] != old["api_key"] and new["api_key"] in out
    assert new["admin_password"] == old["admin_password"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert client_for(new["api_key"]).get("/api/v1/tenants/demo/").status_code == 200
    assert _run("bootstrap", "--print-demo-key").strip() == new["api_key"]

    # Rotating a live key revokes it.
    again = json.loads(path.read_text())
    _run("bootstrap", "--rotate-demo-key")
    assert client_for(again["api_key"]).get("/api/v1/tenants/demo/").status_code == 401
    assert ApiKey.all_tenants.get(key_id=again["api_key_id"]).revoked_at is not None


def test_print_demo_key_without_a_first_start_says_where_it_looked(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    with pytest.raises(CommandError, match=str(tmp_path / "demo-credentials.json")):
        _run("bootstrap", "--print-demo-key")
