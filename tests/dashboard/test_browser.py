"""The dashboard in a real browser (Debian's Chromium through Playwright) against the ASGI site on loopback: local
login, the tenant pages without a console error or a failed request, OIDC single sign-on against a real provider
process (oidc-provider-mock), tenant isolation across browser contexts, and the screenshots in docs/dashboard/.

Run once per CI: on the embedded profile only (the pages do not depend on the database engine). Without
/usr/bin/chromium these tests skip, unless GRYVIA_REQUIRE_BROWSER=1 (.ci/run sets it after installing Chromium)
turns the skip into a failure."""

from __future__ import annotations

import importlib
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import clear_url_caches

from apps.jobs.models import Job, JobEvent
from apps.tenants import services as tenant_services
from apps.tenants.models import Membership
from apps.tenants.sso import discovery
from tests.dashboard.conftest import CHROMIUM
from tests.factories import ACTOR, make_tenant, make_user
from tests.jobs.factories import make_job
from tests.llm.gateway_env import ServerThread
from tests.tenants.test_oidc_sso import _free_port, _sso_on, provider, sso  # noqa: F401 - the real provider process and SSO settings

EMBEDDED = not os.environ.get("DATABASE_URL")
SCREENSHOTS = Path(settings.BASE_DIR) / "docs" / "dashboard"
SCREENSHOT_TIME = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
PASSWORD = "pw-for-tests-1"  # tests.factories.make_user's default

if os.environ.get("GRYVIA_REQUIRE_BROWSER") == "1" and EMBEDDED and not Path(CHROMIUM).exists():
    # CI promised a browser: a missing one is a failure there, not a silent skip.
    raise RuntimeError(f"GRYVIA_REQUIRE_BROWSER=1 but {CHROMIUM} is missing (apt-get install -y chromium)")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not EMBEDDED, reason="the embedded profile's own test (pages, not the database): run once"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}: apt-get install chromium"),
]


class Watched:
    """A page in a fresh light-theme 1280x800 context, recording console errors and failed requests."""

    def __init__(self, browser, base: str) -> None:
        self.base = base
        self.context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="light")
        self.page = self.context.new_page()
        self.problems: list[str] = []
        # Gryvia's pages only: the mock provider's authorize page loads its CSS from a CDN this machine cannot reach.
        self.page.on(
            "console",
            lambda m: self._ours(m.location.get("url") or self.page.url) and m.type == "error" and self._note(m.text),
        )
        self.page.on("pageerror", lambda e: self._ours(self.page.url) and self._note(f"pageerror: {e}"))
        self.page.on("requestfailed", lambda r: self._ours(r.url) and self._note(f"failed: {r.url} {r.failure}"))
        self.page.on("response", lambda r: self._ours(r.url) and r.status >= 400 and self._note(f"{r.status}: {r.url}"))

    def _ours(self, url: str | None) -> bool:
        return bool(url) and url.startswith(self.base)

    def _note(self, problem: str) -> None:
        self.problems.append(problem)

    def goto(self, path: str):
        return self.page.goto(self.base + path)

    def login(self, username: str) -> None:
        self.goto("/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", PASSWORD)
        self.page.click("button[type=submit], input[type=submit]")
        self.page.wait_for_url(self.base + "/")

    def heading(self) -> str:
        return self.page.inner_text("h1")

    def shot(self, name: str) -> None:
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        assert path.stat().st_size < 200_000, f"{path} is {path.stat().st_size} bytes"


@pytest.fixture
def site(transactional_db):
    """The site's real ASGI application (HTTP and the /ws/events/ socket the live pages open) under uvicorn on
    loopback, in a thread of this process so it shares the test database; pytest-django's `live_server` is WSGI and
    would answer the socket with a 404."""
    server = ServerThread().start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


@pytest.fixture
def watched(browser, site):
    opened: list[Watched] = []

    def open_page() -> Watched:
        opened.append(Watched(browser, site))
        return opened[-1]

    yield open_page
    for page in opened:
        page.context.close()


def _member(tenant, username: str, role: str = "member"):
    user = make_user(username)
    tenant_services.membership_add(actor=ACTOR, tenant=tenant, user=user, role=role)
    return user


def test_a_local_user_logs_in_and_opens_the_overview_the_jobs_and_a_job_cleanly(watched):
    demo = make_tenant("demo", display_name="Demo lab")
    _member(demo, "alice")
    job = make_job(demo, name="train-resnet")
    for name, phase in (("eval-bert", "Succeeded"), ("sweep-lr", "Failed"), ("finetune-llama", "Queued")):
        Job.all_tenants.filter(pk=make_job(demo, name=name).pk).update(phase=phase)
    Job.all_tenants.filter(pk=job.pk).update(phase="Running")
    # Fixed times, so the screenshots change only when the pages do (not on every run).
    for minutes, name in enumerate(("train-resnet", "eval-bert", "sweep-lr", "finetune-llama")):
        when = SCREENSHOT_TIME + timedelta(minutes=minutes)
        Job.all_tenants.filter(tenant=demo, name=name).update(created_at=when)
        JobEvent.objects.filter(job__tenant=demo, job__name=name).update(created_at=when)

    view = watched()
    assert view.goto("/").url.endswith("/login/?next=/")
    assert view.heading() == "Sign in to Gryvia"
    view.shot("login")
    view.login("alice")
    assert view.heading() == "Demo lab"
    assert view.page.is_visible("text=train-resnet")
    view.shot("overview")

    view.page.click("header >> text=Jobs")
    view.page.wait_for_url(view.base + "/jobs/")
    assert view.heading() == "Jobs"
    for name in ("train-resnet", "eval-bert", "sweep-lr", "finetune-llama"):
        assert view.page.is_visible(f"text={name}")
    view.shot("jobs")

    view.page.click("main >> text=train-resnet")
    view.page.wait_for_url(view.base + "/jobs/train-resnet/")
    assert view.heading().startswith("train-resnet")
    assert "Running" in view.heading()
    view.shot("job")
    assert view.problems == []


def test_another_tenants_job_is_a_404_in_a_second_browser_context(watched):
    demo, lab = make_tenant("demo"), make_tenant("lab")
    _member(demo, "alice")
    _member(lab, "bob")
    make_job(demo, name="demo-secret")

    alice, bob = watched(), watched()
    alice.login("alice")
    bob.login("bob")
    assert alice.goto("/jobs/demo-secret/").status == 200
    assert bob.goto("/jobs/demo-secret/").status == 404
    assert not bob.page.is_visible("text=demo-secret")
    # That page only, nothing else failed (Chromium logs the 404 document on the console too).
    assert [p for p in bob.problems if not p.startswith("Failed to load resource")] == [
        f"404: {bob.base}/jobs/demo-secret/"
    ]
    assert alice.problems == []


def _provider_user(provider_url: str, sub: str, claims: dict) -> None:
    assert httpx.put(f"{provider_url}/users/{sub}", json=claims).status_code == 204


def _sso_sign_in(view: Watched, sub: str) -> None:
    """Chromium's walk: Gryvia's login page, the provider's authorize form, back to Gryvia's callback."""
    view.goto("/login/")
    view.page.click("text=Sign in with SSO")
    view.page.wait_for_selector("input[name=sub]")
    assert not view.page.url.startswith(view.base)  # on the provider's page now
    view.page.fill("input[name=sub]", sub)
    view.page.click("button:has-text('Authorize')")
    view.page.wait_for_url(lambda url: url.startswith(view.base) and "/oidc/callback/" not in url)


def test_sso_in_chromium_signs_in_a_member_of_the_tenant_in_groups(watched, sso):  # noqa: F811
    make_tenant("demo", display_name="Demo lab")
    _provider_user(sso, "carol", {"email": "carol@example.com", "groups": ["demo"]})
    view = watched()
    _sso_sign_in(view, "carol")
    assert view.page.url == view.base + "/"
    assert view.heading() == "Demo lab"
    assert view.page.is_visible("text=sso-carol")
    membership = Membership.all_tenants.select_related("tenant", "user").get(user__username="sso-carol")
    assert (membership.tenant.slug, membership.role, membership.source) == ("demo", "member", "sso")
    assert view.problems == []


def test_sso_in_chromium_a_claim_without_a_tenant_lands_on_the_no_tenant_page(watched, sso):  # noqa: F811
    make_tenant("demo")
    _provider_user(sso, "dave", {"email": "dave@example.com", "groups": ["nowhere"]})
    view = watched()
    _sso_sign_in(view, "dave")
    assert view.page.url.startswith(view.base + "/oidc/no-tenant/")
    assert view.heading() == "No tenant yet"
    assert not Membership.all_tenants.filter(user__username="sso-dave").exists()
    assert view.problems == []


def test_sso_in_chromium_a_tampered_state_is_refused(watched, sso):  # noqa: F811
    make_tenant("demo")
    _provider_user(sso, "mallory", {"groups": ["demo"]})
    view = watched()

    def forge(route):  # the provider's answer, its redirect's state swapped for one this browser never sent
        if route.request.method != "POST":
            return route.continue_()
        answer = route.fetch(max_redirects=0)
        parts = urlsplit(answer.headers["location"])
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        forged = f"{view.base}{parts.path}?{urlencode({**query, 'state': 'forged-' + query['state']})}"
        return route.fulfill(status=302, headers={**answer.headers, "location": forged})

    view.page.route(re.compile(re.escape(sso) + "/oauth2/authorize"), forge)
    view.goto("/login/")
    view.page.click("text=Sign in with SSO")
    view.page.fill("input[name=sub]", "mallory")
    with view.page.expect_response(lambda r: "/oidc/callback/" in r.url) as answer:
        view.page.click("button:has-text('Authorize')")
    assert answer.value.status == 400
    view.page.wait_for_load_state()
    assert view.heading() == "Single sign-on failed"
    assert view.page.is_visible("text=does not belong to this browser")
    assert not get_user_model().objects.filter(username="sso-mallory").exists()
    assert view.goto("/").url.startswith(view.base + "/login/")  # not signed in


@pytest.fixture
def sso_down():
    """SSO configured against a loopback port nobody listens on."""
    import gryvia_site.urls

    discovery.forget()
    with _sso_on(f"http://127.0.0.1:{_free_port()}"):
        importlib.reload(gryvia_site.urls)
        clear_url_caches()
        yield
    discovery.forget()
    importlib.reload(gryvia_site.urls)
    clear_url_caches()


def test_sso_in_chromium_a_provider_that_is_down_gets_a_clear_page(watched, sso_down):
    view = watched()
    view.goto("/login/")
    with view.page.expect_response(lambda r: "/oidc/authenticate/" in r.url) as answer:
        view.page.click("text=Sign in with SSO")
    assert answer.value.status == 502
    view.page.wait_for_load_state()
    assert view.heading() == "Single sign-on failed"
    assert view.page.is_visible("text=Single sign-on is unavailable")
    assert view.page.is_visible("text=sign in with a local account")
