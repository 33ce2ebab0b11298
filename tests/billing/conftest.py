"""Billing fixtures: a catalog, a platform client, and a clean ledger."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from apps.billing import services
from tests.factories import ACTOR, client_for

from .ledger_tools import clear_billing_history

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
