"""Playwright for the browser tests (tests/dashboard/test_browser.py): Debian's Chromium, never `playwright install`
(shared/reference/machine-notes.md §7)."""

from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "headless": True, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="module")
def playwright(django_db_setup):
    """pytest-playwright's session-wide `playwright`, narrowed to the module that uses it. Playwright's sync API
    leaves an asyncio loop marked running in this thread while it lives: for the rest of a session that would break
    every later async test (pytest-asyncio) and every ORM call (Django's SynchronousOnlyOperation). So it is stopped
    after the module, the test database exists before it starts, and the ORM is allowed beside it meanwhile (the
    live server answers in its own thread either way)."""
    from playwright.sync_api import sync_playwright

    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as started:
            yield started
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture(scope="module")
def browser(playwright, browser_type_launch_args):
    launched = playwright.chromium.launch(**browser_type_launch_args)
    yield launched
    launched.close()
