"""The production profile's services really are used when DATABASE_URL / REDIS_URL are set."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from apps.core import periodic


def test_the_profile_follows_the_environment():
    redis_layer = "channels_redis.core.RedisChannelLayer"
    assert (settings.CHANNEL_LAYERS["default"]["BACKEND"] == redis_layer) == bool(settings.REDIS_URL)
    assert (settings.CELERY_BROKER_URL == settings.REDIS_URL) == bool(settings.REDIS_URL)
    assert periodic.registry.beat_schedule()["reconcile-tenants"]["task"] == "apps.core.tasks.run_periodic"


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgres_is_the_database():
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        assert int(cursor.fetchone()[0].split(".")[0]) >= 13


@pytest.mark.redis
def test_redis_backs_cache_and_channel_layer():
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    cache.set("gryvia-profile-probe", "here", 30)
    assert any(b"gryvia-profile-probe" in key for key in client.keys("*gryvia-profile-probe*"))

    async def roundtrip():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("profile-probe", channel)
        await layer.group_send("profile-probe", {"type": "probe", "n": 1})
        return await asyncio.wait_for(layer.receive(channel), 5)

    assert asyncio.run(roundtrip())["n"] == 1


@pytest.mark.redis
@pytest.mark.django_db
def test_a_nudge_queues_the_periodic_task_on_the_redis_broker(django_capture_on_commit_callbacks):
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("celery")
    with django_capture_on_commit_callbacks(execute=True):
        periodic.nudge("reconcile-tenants")
    messages = client.lrange("celery", 0, -1)
    client.delete("celery")
    assert len(messages) == 1 and b"apps.core.tasks.run_periodic" in messages[0]


@pytest.mark.django_db(transaction=True)
def test_the_embedded_ticker_runs_a_nudged_pass(tenant_a):
    from apps.cluster.backends import get_backend
    from apps.cluster.backends.base import NAMESPACE

    ticker = periodic.Ticker([dataclasses.replace(periodic.registry.get("reconcile-tenants"), every=3600.0)])
    ticker.start()
    try:
        from tests.factories import make_tenant

        make_tenant("late")  # committed: its nudge wakes the ticker
        import time

        deadline = time.monotonic() + 15
        names: list[str] = []
        while time.monotonic() < deadline:
            names = [o["metadata"]["name"] for o in get_backend().list(NAMESPACE)]
            if "tenant-late" in names:
                break
            time.sleep(0.1)
        assert "tenant-late" in names and "tenant-alpha" in names
    finally:
        ticker.stop()
