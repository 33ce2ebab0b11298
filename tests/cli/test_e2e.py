"""End to end: the CLI against the real Django app, served by pytest-django's live server."""

from __future__ import annotations

import json

import pytest

from tests.factories import make_key, make_tenant

from .conftest import Run


@pytest.mark.django_db(transaction=True)
def test_whoami_lists_the_tenant_of_the_key(live_server, cli: Run):
    tenant = make_tenant("cli-e2e", display_name="CLI end to end")
    make_tenant("someone-else")
    key = make_key(tenant)
    result = cli("--url", live_server.url, "--api-key", key, "whoami", "-o", "json")
    assert result.code == 0, result.err
    tenants = json.loads(result.out)
    assert [t["slug"] for t in tenants] == ["cli-e2e"]
    assert tenants[0]["display_name"] == "CLI end to end"
    assert key not in result.out + result.err

    refused = cli("--url", live_server.url, "--api-key", key + "x", "whoami")
    assert refused.code == 1 and refused.err.startswith("error: ")
