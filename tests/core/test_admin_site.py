"""The admin as an operator meets it (issue 27, item 10): Gryvia's name and version, its icon, plural names that
read right, and one log line per request warning."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version as package_version
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
OUR_APPS = {"core", "tenants", "jobs", "queueing", "billing", "llm", "webhooks", "cluster"}


def test_the_admin_is_branded_gryvia_with_its_version(staff_client):
    version = package_version("gryvia")
    page = staff_client.get(reverse("admin:index")).content.decode()
    assert f"Gryvia {version}" in page
    assert "Django administration" not in page and "Django site admin" not in page
    login = Client().get(reverse("admin:login")).content.decode()
    assert f"Gryvia {version}" in login
    assert '<link rel="icon" type="image/svg+xml" href="/static/gryvia/favicon.svg">' in page


def test_favicon_answers_with_an_icon_the_app_serves():
    response = Client().get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == "/static/gryvia/favicon.svg"
    path = finders.find("gryvia/favicon.svg")  # what the static handler serves at that URL
    assert path and Path(path).read_text().startswith("<svg")


def test_model_names_read_right_in_the_admin(staff_client):
    page = staff_client.get(reverse("admin:index")).content.decode()
    for name in ("Model aliases", "LLM usage (hourly)", "LLM usage", "API keys"):
        assert f">{name}</a>" in page, name
    for wrong in ("aliass", "hourlys", "Api keys", "Llm usage"):
        assert wrong not in page, wrong
    ours = [model for model in admin.site._registry if model._meta.app_label in OUR_APPS]
    assert len(ours) > 20
    for model in ours:
        plural = str(model._meta.verbose_name_plural)
        # Django's default plural is the singular plus "s": wrong after a sibilant or a consonant's "y".
        assert not plural.endswith(("ss", "xs", "shs", "chs")), plural
        assert not (plural.endswith("ys") and plural[-3] not in "aeiou"), plural
        for acronym in ("api", "llm", "gpu", "sku"):
            assert acronym not in plural.split(), plural


def test_a_request_warning_is_logged_once_with_its_traceback():
    """The settings' LOGGING as a process of the app applies it: each django.request record is written once."""
    script = """
import django, logging
django.setup()
from django.test import Client
Client().get("/no-such-page/")
try:
    raise ValueError("boom")
except ValueError:
    logging.getLogger("django.request").warning("Bad Request: /api/v1/jobs/", exc_info=True)
"""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gryvia_site.settings.test", "GRYVIA_DEBUG": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    log = result.stderr
    assert log.count("Not Found: /no-such-page/") == 1, log
    assert log.count("Bad Request: /api/v1/jobs/") == 1, log
    assert log.count("Traceback (most recent call last)") == 1, log
    assert log.count("ValueError: boom") == 1, log
