"""Requests with no or a bad credential are limited per client address (GRYVIA_API_ANON_RATE), checked before the
credential is looked up, so one address can test only so many guessed keys (issue 28 item 3)."""

from __future__ import annotations

import pytest
import requests
from rest_framework.throttling import SimpleRateThrottle

from tests.factories import client_for

pytestmark = pytest.mark.django_db

BAD_KEY = "gry_abcdefgh_" + "x" * 40


@pytest.fixture
def three_per_minute(monkeypatch):
    monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, "anon", "3/min")  # GRYVIA_API_ANON_RATE


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_bad_keys_is_refused_from_some_point_on(live_server, key_a):
    session = requests.Session()
    answers = [
        session.get(f"{live_server.url}/api/v1/tenants/", headers={"Authorization": f"Bearer {BAD_KEY}{n}"})
        for n in range(100)
    ]
    statuses = [a.status_code for a in answers]
    assert 429 in statuses
    limit = int(SimpleRateThrottle.THROTTLE_RATES["anon"].split("/")[0])  # 60/min unless the environment says
    assert statuses == [401] * limit + [429] * (100 - limit)
    refused = answers[-1]
    assert refused.json()["error"]["type"] == "rate_limited"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["X-RateLimit-Limit"] == str(limit) and refused.headers["X-RateLimit-Remaining"] == "0"
    assert answers[0].headers["X-RateLimit-Remaining"] == str(limit - 1)  # a 401 says where the address stands
    # While the address is over, a valid key from it waits too: its answer would tell a right guess from a wrong one.
    valid = session.get(f"{live_server.url}/api/v1/tenants/", headers={"Authorization": f"Bearer {key_a}"})
    assert valid.status_code == 429


def test_no_key_is_looked_up_once_the_address_is_over(three_per_minute, monkeypatch):
    from apps.tenants.services import credentials as services

    lookups = []
    real = services.api_key_authenticate
    monkeypatch.setattr(services, "api_key_authenticate", lambda **kw: lookups.append(1) or real(**kw))
    client = client_for(BAD_KEY)
    assert [client.get("/api/v1/jobs/").status_code for _ in range(6)] == [401] * 3 + [429] * 3
    assert len(lookups) == 3


def test_no_credential_and_bad_tokens_share_the_address_limit(three_per_minute, key_a):
    anonymous = client_for()
    assert anonymous.get("/api/v1/tenants/").status_code == 401
    assert client_for("not-a-real-oauth-token").get("/api/v1/tenants/").status_code == 401
    assert client_for(HTTP_AUTHORIZATION="Basic dXNlcjpwYXNz").get("/api/v1/tenants/").status_code == 401
    assert anonymous.get("/api/v1/tenants/").status_code == 429
    # X-Forwarded-For is not an address: a client cannot pick a fresh one per request.
    assert client_for(HTTP_X_FORWARDED_FOR="192.0.2.44").get("/api/v1/tenants/").status_code == 429
    # Another address has its own count, and a valid key from it is served.
    assert client_for(key_a, REMOTE_ADDR="198.51.100.8").get("/api/v1/tenants/").status_code == 200


def test_valid_credentials_do_not_use_up_the_address_limit(three_per_minute, client_a):
    assert {client_a.get("/api/v1/tenants/").status_code for _ in range(6)} == {200}
    assert client_for().get("/api/v1/tenants/").status_code == 401


def test_the_real_server_believes_no_forwarded_address_unless_told(tmp_path):
    """`manage.py serve` (uvicorn) trusted X-Forwarded-For from any loopback peer, so a local client could pick a
    fresh address per request and never be throttled; now only GRYVIA_TRUSTED_PROXIES' are believed."""
    import os
    import sys

    from tests.jobs.restarts import free_port, kill_session, start, wait_for

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "GRYVIA_TRUSTED_PROXIES")}
    env.update(GRYVIA_DATA_DIR=str(tmp_path), GRYVIA_API_ANON_RATE="5/min", GRYVIA_PORT=str(port))
    log = tmp_path / "serve.log"
    server = start([sys.executable, "manage.py", "serve"], env=env, log=log)
    url = f"http://127.0.0.1:{port}/api/v1/jobs/"
    try:
        wait_for("the server", lambda: _answers(url), log=log)
        codes = [
            requests.get(url, headers={"X-Forwarded-For": f"192.0.2.{i}"}, timeout=5).status_code for i in range(8)
        ]
    finally:
        kill_session(server)
    assert codes[-1] == 429 and codes.count(401) <= 5, codes


def _answers(url: str) -> bool:
    try:
        return requests.get(url, headers={"X-Forwarded-For": "203.0.113.1"}, timeout=2).status_code in (401, 429)
    except requests.RequestException:
        return False
