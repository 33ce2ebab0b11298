"""Shared fixtures. Tests marked `postgres` or `redis` skip, visibly, when the profile lacks that service."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from tests.factories import client_for, make_key, make_tenant


def pytest_collection_modifyitems(config, items):
    is_pg = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    if os.environ.get("GRYVIA_REQUIRE_SERVICES") == "1" and not (is_pg and settings.REDIS_URL):
        # CI's production-profile run: a PostgreSQL or Redis test that would skip is a failure.
        raise pytest.UsageError("GRYVIA_REQUIRE_SERVICES=1 needs DATABASE_URL (PostgreSQL) and REDIS_URL")
    for item in items:
        if "postgres" in item.keywords and not is_pg:
            item.add_marker(pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL"))
        if "redis" in item.keywords and not settings.REDIS_URL:
            item.add_marker(pytest.mark.skip(reason="needs Redis: set REDIS_URL"))


def _transactional(item) -> bool:
    marker = item.get_closest_marker("django_db")
    if marker is not None and (marker.kwargs.get("transaction") or (marker.args and marker.args[0])):
        return True
    return bool({"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Before a transactional test's flush on SQLite (DELETE FROM every table): billing history is append-only in
    the database (triggers), so it is cleared the way the `clean_ledger` fixture does. PostgreSQL's flush is a
    TRUNCATE, which row triggers do not see."""
    if _transactional(item) and not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        from tests.billing.ledger_tools import billing_rows, clear_billing_history

        try:
            if billing_rows():
                clear_billing_history()
        except Exception:  # noqa: BLE001 - no database in this test after all: nothing to clear
            pass
    yield


@pytest.fixture(autouse=True)
def _fresh_cache_and_backend():
    """Throttle counters and the local backend's store do not leak between tests."""
    from django.core.cache import cache

    from apps.cluster.backends import set_backend
    from apps.cluster.backends.local import LocalBackend

    cache.clear()
    set_backend(LocalBackend())
    yield
    set_backend(None)


@pytest.fixture
def tenant_a(db):
    return make_tenant("alpha")


@pytest.fixture
def tenant_b(db):
    return make_tenant("bravo")


@pytest.fixture
def key_a(tenant_a):
    return make_key(tenant_a, ["admin"], name="a-admin")


@pytest.fixture
def key_b(tenant_b):
    return make_key(tenant_b, ["admin"], name="b-admin")


@pytest.fixture
def client_a(key_a):
    return client_for(key_a)


@pytest.fixture
def client_b(key_b):
    return client_for(key_b)


@pytest.fixture
def staff_client(django_user_model):
    """A Django test client logged in as a superuser (the admin's tests)."""
    from django.test import Client

    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-for-tests-1")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def platform_key(tenant_a):
    return make_key(tenant_a, ["admin"], platform=True, name="platform")
