"""The API docs page works offline (issue 27, item 5): Swagger UI comes from the installed drf-spectacular-sidecar,
every file it names is a local URL that the server itself serves, and nothing is sent to another host."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.llm.gateway_env import ServerThread


@pytest.fixture
def site():
    server = ServerThread().start()
    yield httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=20)
    server.stop()


def test_schema_ui_names_only_local_files_and_the_server_serves_them(site):
    page = site.get("/api/v1/schema/ui/")
    assert page.status_code == 200 and "swagger-ui" in page.text
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", page.text, re.I), "the page names another host"
    # The start-up script is a file of its own (the page's Content-Security-Policy runs no inline script).
    script = site.get("/api/v1/schema/ui/?script=").text
    assert '"validatorUrl": null' in script  # no schema sent to validator.swagger.io
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert {u.rsplit("/", 1)[-1] for u in urls} >= {"swagger-ui.css", "swagger-ui-bundle.js"}
    for url in urls:
        assert url.startswith("/static/") or url == "/api/v1/schema/ui/?script=", url
        served = site.get(url)
        assert served.status_code == 200 and served.content, url
    schema_url = re.search(r'url: "([^"]+)"', script)[1]
    assert schema_url == "/api/v1/schema/" and site.get(schema_url).status_code == 200
