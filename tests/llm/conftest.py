"""Fixtures for the gateway's end-to-end tests: a running Gryvia and stand-in upstreams on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from apps.llm.gateway.meter import meter
from benchmarks.upstream import Upstream
from benchmarks.upstream_replies import ANY_MODEL
from tests.factories import make_key, make_tenant

from .gateway_env import ServerThread, clear_counters


@pytest.fixture
def gateway(transactional_db) -> Iterator[ServerThread]:
    """Gryvia's ASGI application served on loopback, sharing the test database."""
    clear_counters()
    server = ServerThread().start()
    yield server
    server.stop()
    meter.flush()
    clear_counters()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream(name="one", model_ids=(ANY_MODEL,)) as server:
        yield server


@pytest.fixture
def acme(gateway):
    return make_tenant("acme")


@pytest.fixture
def acme_key(acme) -> str:
    return make_key(acme, ["llm:invoke"], name="app")


@pytest.fixture
def llm(gateway, acme_key) -> Iterator[openai.OpenAI]:
    """The official client, pointed at the gateway with acme's key."""
    with openai.OpenAI(base_url=gateway.url, api_key=acme_key, max_retries=0, timeout=20) as client:
        yield client
