"""No credential in a URL or a log; a Content-Security-Policy on every HTML page (issue 28, items 4 and 6).

Through the real ASGI application under uvicorn on loopback (tests.llm.gateway_env.ServerThread), and, for the
access log, `manage.py serve` itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from django.conf import settings
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_application_model

from apps.tenants import services
from tests.factories import ACTOR, make_user
from tests.llm.gateway_env import ServerThread, free_port

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-for-tests-1"


@pytest.fixture
def site(transactional_db):
    server = ServerThread().start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


def _access_token(user, scope: str = "openid read") -> str:
    Application = get_application_model()
    app = Application.objects.create(
        name="query test",
        client_id="query-test",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1/callback",
        algorithm=Application.RS256_ALGORITHM,
    )
    raw = "tok" + "x1" * 20
    expires = timezone.now() + timedelta(hours=1)
    get_access_token_model().objects.create(user=user, application=app, token=raw, scope=scope, expires=expires)
    return raw


def test_a_credential_in_the_query_string_is_refused_on_every_surface(site, tenant_a):
    user = make_user("qs-user", password=PASSWORD)
    services.membership_add(actor=ACTOR, tenant=tenant_a, user=user, role="admin")
    token = _access_token(user)
    _key, api_key = services.api_key_create(actor=ACTOR, tenant=tenant_a, scopes=["admin"], name="qs")

    # The header still works: the refusal is about where the credential travels.
    assert httpx.get(f"{site}/o/userinfo/", headers={"Authorization": f"Bearer {token}"}).status_code == 200

    userinfo = httpx.get(f"{site}/o/userinfo/", params={"access_token": token})
    assert userinfo.status_code == 400, userinfo.text
    assert userinfo.json()["error"] == "invalid_request"
    assert "Authorization header" in userinfo.json()["error_description"]

    api = httpx.get(f"{site}/api/v1/tenants/", params={"access_token": api_key})
    assert api.status_code == 400, api.text
    assert api.json()["error"]["type"] == "invalid_request"
    assert "access_token" in api.json()["error"]["message"]

    # An API key under any parameter name, on the OpenAI-compatible API: OpenAI's envelope.
    openai = httpx.get(f"{site}/v1/models", params={"key": api_key})
    assert openai.status_code == 400, openai.text
    assert openai.json()["error"]["code"] == "credential_in_url"
    assert openai.json()["error"]["type"] == "invalid_request_error"

    admin = httpx.get(f"{site}/admin/login/", params={"api_key": api_key})
    assert admin.status_code == 400


class _Page(HTMLParser):
    """The page's <script> elements (src or inline) and inline event handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str | None] = []
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "script":
            self.scripts.append(attr.get("src"))
        self.handlers += [name for name in attr if name.startswith("on")]


def _check_page(http: httpx.Client, url: str) -> None:
    """The page carries the policy, and everything it runs is allowed by it: no inline script or handler, every
    script from this origin and served."""
    page = http.get(url)
    assert page.status_code == 200, (url, page.status_code)
    assert page.headers["content-security-policy"] == settings.GRYVIA_CONTENT_SECURITY_POLICY
    policy = dict(part.split(" ", 1) for part in page.headers["content-security-policy"].split("; "))
    assert policy["script-src"] == "'self'" and policy["frame-ancestors"] == "'none'"
    parsed = _Page()
    parsed.feed(page.text)
    assert None not in parsed.scripts, f"{url} has an inline <script> that script-src 'self' blocks"
    assert not parsed.handlers, f"{url} has inline event handlers {parsed.handlers}"
    for src in parsed.scripts:
        absolute = urljoin(str(page.url), src)
        assert urlsplit(absolute).netloc == urlsplit(str(page.url)).netloc, src
        assert http.get(absolute).status_code == 200, absolute


def test_every_html_page_carries_a_content_security_policy_it_works_under(site):
    root = make_user("csp-root", staff=True, password=PASSWORD)
    root.is_superuser = True
    root.save()
    with httpx.Client(base_url=site) as http:
        for path in ("/admin/login/", "/accounts/login/", "/api/v1/schema/ui/"):
            _check_page(http, site + path)
        login = http.get("/admin/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        signed_in = http.post(
            "/admin/login/?next=/admin/",
            data={"username": "csp-root", "password": PASSWORD, "csrfmiddlewaretoken": csrf, "next": "/admin/"},
            headers={"Referer": f"{site}/admin/login/"},
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
        for path in ("/admin/", "/admin/tenants/tenant/", "/admin/tenants/tenant/add/"):
            _check_page(http, site + path)
        # JSON answers are not pages: they need no policy.
        assert "content-security-policy" not in http.get("/api/v1/schema/?format=json").headers


def test_uvicorn_access_log_never_shows_a_query_string_credential(tmp_path):
    """`manage.py serve` on a data dir of its own: the refusal comes before any database access."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "GRYVIA_DATA_DIR")}
    env["GRYVIA_DATA_DIR"] = str(tmp_path)
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=env, stdout=out, stderr=out
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                try:
                    httpx.get(f"http://127.0.0.1:{port}/favicon.ico", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            secret = "tokSECRET" + "z9" * 20
            key = "gry_abcdefgh_" + "K" * 40
            url = f"http://127.0.0.1:{port}"
            assert httpx.get(f"{url}/o/userinfo/?access_token={secret}&page=2").status_code == 400
            assert httpx.get(f"{url}/v1/models?q={key}").status_code == 400
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    written = log.read_text()
    assert "/o/userinfo/?access_token=[redacted]&page=2" in written, written[-3000:]
    assert "/v1/models?q=[redacted]" in written
    assert secret not in written and key not in written
