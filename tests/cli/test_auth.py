"""`gryvia login/logout/whoami`, the config file and OAuth renewal, against the stand-in API."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from .conftest import KEY, Run, page
from .standin import Answer, Recorded, StandIn, error

TENANTS = "/api/v1/tenants/"
TOKEN = "/o/token/"
ALPHA = {"slug": "alpha", "display_name": "Alpha", "namespace": "gryvia-alpha", "status": {"phase": "Ready"}}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _save_oauth(config_path: Path, url: str, **tokens: str) -> None:
    config_path.parent.mkdir(parents=True, exist_ok=True)
    data = {"url": url, "oauth": {"client_id": "gryvia-cli-device", **tokens}}
    config_path.write_text(json.dumps(data))
    config_path.chmod(0o600)


def test_login_with_api_key_saves_0600_config_without_echoing(standin: StandIn, cli: Run, config_path: Path):
    standin.add("GET", TENANTS, Answer(json=page([ALPHA])))
    result = cli("--url", standin.url, "login", "--api-key", KEY)
    assert result.code == 0, result.err
    assert KEY not in result.out + result.err
    assert "alpha" in result.out
    assert standin.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert json.loads(config_path.read_text()) == {"url": standin.url, "api_key": KEY}
    assert _mode(config_path) == 0o600

    # The saved key is used from then on, with no flags but the URL it belongs to.
    again = cli("--url", standin.url, "whoami", "-o", "json")
    assert again.code == 0 and json.loads(again.out) == [ALPHA]
    assert standin.requests[-1].headers["authorization"] == f"Bearer {KEY}"


def test_login_reads_the_key_from_stdin(standin: StandIn, cli: Run, config_path: Path):
    standin.add("GET", TENANTS, Answer(json=page([ALPHA])))
    result = cli("--url", standin.url, "login", "--api-key", "-", stdin=KEY + "\n")
    assert result.code == 0, result.err
    assert json.loads(config_path.read_text())["api_key"] == KEY


def test_login_with_a_refused_key_saves_nothing(standin: StandIn, cli: Run, config_path: Path):
    standin.add("GET", TENANTS, error(401, "Invalid API key."))
    result = cli("--url", standin.url, "login", "--api-key", "wrong-key")
    assert result.code == 1
    assert result.err == f"error: {standin.url} did not accept this API key: Invalid API key.\n"
    assert not config_path.exists()


def test_login_without_a_key_or_terminal_is_a_usage_error(standin: StandIn, cli: Run):
    result = cli("--url", standin.url, "login")
    assert result.code == 2 and "--api-key" in result.err
    assert standin.requests == []


def test_device_flow_polls_until_approved_and_saves_tokens(standin: StandIn, cli: Run, config_path: Path):
    grant = {
        "device_code": "dev-123",
        "user_code": "WDJB-MJHT",
        "verification_uri": f"{standin.url}/o/device/",
        "expires_in": 600,
        "interval": 0.01,
    }
    pending = Answer(400, json={"error": "authorization_pending"})
    tokens = {"access_token": "at-1", "refresh_token": "rt-1", "expires_in": 3600, "scope": "openid read write"}
    standin.add("POST", "/o/device-authorization/", Answer(json=grant))
    standin.add("POST", TOKEN, pending, pending, Answer(json=tokens))
    standin.add("GET", TENANTS, Answer(json=page([ALPHA])))
    result = cli("--url", standin.url, "login", "--device")
    assert result.code == 0, result.err
    assert f"{standin.url}/o/device/" in result.err and "WDJB-MJHT" in result.err
    assert "at-1" not in result.out + result.err and "rt-1" not in result.out + result.err

    started = standin.seen("POST", "/o/device-authorization/")[0].form()
    assert started == {"client_id": "gryvia-cli-device", "scope": "openid read write"}
    polls = standin.seen("POST", TOKEN)
    assert len(polls) == 3
    assert polls[0].form() == {
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": "dev-123",
        "client_id": "gryvia-cli-device",
    }
    assert standin.seen("GET", TENANTS)[0].headers["authorization"] == "Bearer at-1"
    saved = json.loads(config_path.read_text())
    assert saved["url"] == standin.url and "api_key" not in saved
    assert saved["oauth"]["access_token"] == "at-1" and saved["oauth"]["refresh_token"] == "rt-1"
    assert saved["oauth"]["expires_at"] > 0
    assert _mode(config_path) == 0o600


def test_device_flow_denied(standin: StandIn, cli: Run, config_path: Path):
    grant = {"device_code": "d", "user_code": "U", "verification_uri": "x", "expires_in": 60, "interval": 0.01}
    standin.add("POST", "/o/device-authorization/", Answer(json=grant))
    standin.add("POST", TOKEN, Answer(400, json={"error": "access_denied"}))
    result = cli("--url", standin.url, "login", "--device")
    assert (result.code, result.err.splitlines()[-1]) == (1, "error: the sign-in was denied")
    assert not config_path.exists()


def test_401_with_refresh_token_refreshes_once_and_retries(standin: StandIn, cli: Run, config_path: Path):
    _save_oauth(config_path, standin.url, access_token="old-at", refresh_token="old-rt")

    def jobs(request: Recorded) -> Answer:
        if request.headers.get("authorization") == "Bearer new-at":
            return Answer(json=page([]))
        return error(401, "Token expired.")

    standin.add("GET", "/api/v1/jobs/", jobs)
    standin.add("POST", TOKEN, Answer(json={"access_token": "new-at", "refresh_token": "new-rt", "expires_in": 60}))
    result = cli("--url", standin.url, "jobs", "list")
    assert result.code == 0, result.err
    assert [(r.method, r.path) for r in standin.requests] == [
        ("GET", "/api/v1/jobs/"),
        ("POST", TOKEN),
        ("GET", "/api/v1/jobs/"),
    ]
    assert standin.requests[1].form() == {
        "grant_type": "refresh_token",
        "refresh_token": "old-rt",
        "client_id": "gryvia-cli-device",
    }
    saved = json.loads(config_path.read_text())["oauth"]
    assert (saved["access_token"], saved["refresh_token"]) == ("new-at", "new-rt")
    assert _mode(config_path) == 0o600


def test_failed_refresh_asks_to_sign_in_again(standin: StandIn, cli: Run, config_path: Path):
    _save_oauth(config_path, standin.url, access_token="old-at", refresh_token="old-rt")
    standin.add("GET", "/api/v1/jobs/", error(401, "Token expired."))
    standin.add("POST", TOKEN, Answer(400, json={"error": "invalid_grant"}))
    result = cli("--url", standin.url, "jobs", "list")
    assert result.code == 1
    assert "Token expired." in result.err and "gryvia login --device" in result.err
    assert len(standin.seen("POST", TOKEN)) == 1 and len(standin.seen("GET")) == 1


def test_api_key_401_does_not_try_to_refresh(standin: StandIn, cli: Run):
    standin.add("GET", "/api/v1/jobs/", error(401, "Invalid API key."))
    result = cli("--url", standin.url, "--api-key", KEY, "jobs", "list")
    assert result.code == 1
    assert [r.path for r in standin.requests] == ["/api/v1/jobs/"]


def test_saved_credential_is_not_sent_to_another_server(standin: StandIn, cli: Run, config_path: Path):
    config_path.parent.mkdir(parents=True)
    config_path.write_text(json.dumps({"url": "https://gryvia.example.com", "api_key": KEY}))
    config_path.chmod(0o600)
    standin.add("GET", TENANTS, error(401, "Authentication credentials were not provided."))
    result = cli("--url", standin.url, "whoami")
    assert result.code == 1
    assert "authorization" not in standin.requests[0].headers
    assert "the saved credential is for https://gryvia.example.com" in result.err


def test_env_and_tenant_header(standin: StandIn, cli: Run, monkeypatch):
    monkeypatch.setenv("GRYVIA_URL", standin.url)
    monkeypatch.setenv("GRYVIA_API_KEY", KEY)
    monkeypatch.setenv("GRYVIA_TENANT", "alpha")
    standin.add("GET", TENANTS, Answer(json=page([ALPHA])))
    result = cli("whoami")
    assert result.code == 0, result.err
    assert "an API key (from GRYVIA_API_KEY)" in result.out
    assert result.out.splitlines()[1].split() == ["TENANT", "DISPLAY", "NAME", "NAMESPACE", "PHASE"]
    assert "gryvia-alpha" in result.out
    assert standin.requests[0].headers["x-gryvia-tenant"] == "alpha"


def test_logout_removes_the_credential(standin: StandIn, cli: Run, config_path: Path):
    _save_oauth(config_path, standin.url, access_token="at", refresh_token="rt")
    standin.add("POST", "/o/revoke_token/", Answer(200, text=""))
    result = cli("logout")
    assert result.code == 0, result.err
    saved = json.loads(config_path.read_text())
    assert saved == {"url": standin.url}
    assert _mode(config_path) == 0o600
    assert {r.form()["token"] for r in standin.seen("POST", "/o/revoke_token/")} == {"at", "rt"}
    assert "Not logged in" in cli("logout").out
