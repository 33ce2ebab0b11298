"""`gryvia login` against the real Django app: the server's one check of an API key decides, and the CLI says its
reason (apps.tenants.services.api_key_verify; the same message REST and the LLM gateway give)."""

from __future__ import annotations

import pytest

from apps.tenants import services
from apps.tenants.models import ApiKey
from tests.factories import ACTOR, make_key, make_tenant

from .conftest import Run


@pytest.mark.django_db(transaction=True)
def test_login_with_a_suspended_tenants_key_is_refused_with_its_reason(live_server, cli: Run, config_path):
    tenant = make_tenant("cli-suspended")
    key = make_key(tenant, ["jobs:read"])
    services.tenant_update(actor=ACTOR, tenant=tenant, suspended=True)
    refused = cli("--url", live_server.url, "login", "--api-key", key)
    assert refused.code == 1
    assert refused.err == (
        f"error: {live_server.url} did not accept this API key: tenant 'cli-suspended' is suspended: its API keys are "
        "refused until it is resumed\n"
    )
    assert not config_path.exists()

    services.tenant_update(actor=ACTOR, tenant=tenant, suspended=False)
    accepted = cli("--url", live_server.url, "login", "--api-key", key)
    assert accepted.code == 0, accepted.err
    assert "cli-suspended" in accepted.out and config_path.exists()


@pytest.mark.django_db(transaction=True)
def test_login_with_a_revoked_key_says_it_was_revoked(live_server, cli: Run, config_path):
    key = make_key(make_tenant("cli-revoked"), ["jobs:read"])
    key_id = services.parse_key(key)[0]
    services.api_key_revoke(actor=ACTOR, key=ApiKey.all_tenants.get(key_id=key_id))
    refused = cli("--url", live_server.url, "login", "--api-key", key)
    assert refused.code == 1
    assert refused.err.endswith(f"did not accept this API key: API key {key_id} was revoked\n")
    assert not config_path.exists()
