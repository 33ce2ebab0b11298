"""Management commands: create_tenant, create_api_key, bootstrap."""

from __future__ import annotations

import io
import json
import stat

import pytest
from django.core.management import CommandError, call_command
from oauth2_provider.models import get_application_model

from apps.tenants.models import ApiKey, Tenant
from tests.factories import client_for

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_tenant_and_key_as_json():
    tenant = json.loads(_run("create_tenant", "research", "--gpus", "8", "--json"))
    assert tenant == {"slug": "research", "namespace": "tenant-research", "max_gpus": 8}
    assert Tenant.objects.get(slug="research").max_gpus == 8
    created = json.loads(_run("create_api_key", "--tenant", "research", "--scopes", "jobs:read,keys:read", "--json"))
    assert set(created) >= {"id", "key"} and created["key"].startswith(f"gry_{created['id']}_")
    listed = client_for(created["key"]).get("/api/v1/api-keys/").json()["results"]
    assert [k["id"] for k in listed] == [created["id"]]


def test_platform_key_from_the_command_line_sees_every_tenant():
    _run("create_tenant", "one")
    _run("create_tenant", "two")
    created = json.loads(_run("create_api_key", "--tenant", "one", "--platform", "--json"))
    assert ApiKey.all_tenants.get(key_id=created["id"]).is_platform
    slugs = [t["slug"] for t in client_for(created["key"]).get("/api/v1/tenants/").json()["results"]]
    assert slugs == ["one", "two"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create_tenant", "Bad_Slug"), "slug"),
        (("create_api_key", "--tenant", "missing"), "does not exist"),
        (("create_api_key", "--tenant", "demo2", "--scopes", "jobs:fly"), "unknown scopes"),
    ],
)
def test_bad_arguments_give_a_clear_error(args, message):
    _run("create_tenant", "demo2")
    with pytest.raises(CommandError, match=message):
        _run(*args)


def test_bootstrap_prints_credentials_once_and_writes_them_0600(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    first = _run("bootstrap")
    path = tmp_path / "demo-credentials.json"
    creds = json.loads(path.read_text())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert creds["api_key"] in first and creds["admin_password"] in first
    assert client_for(creds["api_key"]).get("/api/v1/tenants/demo/").status_code == 200
    second = _run("bootstrap")
    assert creds["api_key"] not in second and str(path) in second
    assert get_application_model().objects.filter(client_id__in=["gryvia-cli", "gryvia-cli-device"]).count() == 2
