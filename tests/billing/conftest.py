"""Billing fixtures: a catalog, a platform client, a clean ledger, and Stripe on loopback (localstripe and the HTTP
fake of stripe_fakes.py, with the settings pointing at them) for the test_stripe_* modules."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from apps.billing import services
from tests.factories import ACTOR, client_for

from .ledger_tools import clear_billing_history
from .stripe_fakes import KEY, SECRET, FakeStripe, LocalStripe

T0 = dt.datetime(2026, 9, 3, 10, 0, tzinfo=dt.UTC)


@pytest.fixture
def clean_ledger(db):
    """No usage records or ledger entries at the start (nor at the end) of the test, triggers in place."""
    clear_billing_history()
    yield
    clear_billing_history()


@pytest.fixture
def platform_client(platform_key):
    return client_for(platform_key)


def make_sku(name: str = "h100", gpu_type: str = "H100", rate: str = "2.5", **fields):
    fields.setdefault("effective_from", T0 - dt.timedelta(days=365))
    return services.sku_create(actor=ACTOR, name=name, gpu_type=gpu_type, hourly_rate=Decimal(rate), **fields)


@pytest.fixture
def h100(db):
    return make_sku()


@pytest.fixture(scope="session")
def localstripe_server():
    server = LocalStripe().start()
    yield server
    server.stop()


@pytest.fixture
def localstripe(localstripe_server, settings):
    localstripe_server.reset()
    settings.GRYVIA_STRIPE_API_KEY = KEY
    settings.GRYVIA_STRIPE_API_BASE = localstripe_server.url
    settings.GRYVIA_STRIPE_MAX_RETRIES = 0
    settings.GRYVIA_STRIPE_TIMEOUT_S = 5
    yield localstripe_server
    localstripe_server.reset()


@pytest.fixture
def fake(localstripe, settings):
    """The HTTP fake in front of localstripe, and the settings pointing at it."""
    server = FakeStripe(upstream=localstripe)
    settings.GRYVIA_STRIPE_API_BASE = server.url
    settings.GRYVIA_STRIPE_WEBHOOK_SECRET = SECRET
    yield server
    server.stop()


@pytest.fixture
def skus(db):
    make_sku()
    make_sku("l40s", gpu_type="L40S", rate="1.2")
