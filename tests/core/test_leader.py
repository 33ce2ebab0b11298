"""The leader lease in Redis: one holder at a time, renewed and released only by its holder, lost after its TTL."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings

from apps.core.leader import LeaderLease, lease_holder

KEY = "gryvia:test:lease"


@pytest.fixture
def client():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(KEY)
    yield client
    client.delete(KEY)


@pytest.mark.redis
def test_one_holder_at_a_time_and_a_clean_release_hands_over_at_once(client):
    first = LeaderLease(client=client, key=KEY, ttl_s=30)
    second = LeaderLease(client=client, key=KEY, ttl_s=30)
    assert first.try_acquire() and first.held
    assert not second.try_acquire() and not second.held
    assert lease_holder(client=client, key=KEY).token == first.token

    second.release()  # not its lease: nothing happens to the holder's
    assert lease_holder(client=client, key=KEY).token == first.token
    assert not second.renew()

    first.release()
    assert not first.held and lease_holder(client=client, key=KEY) is None
    assert second.try_acquire()


@pytest.mark.redis
def test_a_holder_that_stops_renewing_loses_the_lease_to_a_standby(client):
    gone = LeaderLease(client=client, key=KEY, ttl_s=0.3)
    standby = LeaderLease(client=client, key=KEY, ttl_s=0.3)
    assert gone.try_acquire()
    assert gone.renew() and 0 < lease_holder(client=client, key=KEY).ttl_left_s <= 0.3
    time.sleep(0.4)  # as after a SIGKILL: no renewal, no release
    assert not gone.held  # its own view ends no later than Redis's
    assert standby.try_acquire()
    assert not gone.renew()  # a late renewal cannot take the lease back
    gone.release()
    assert lease_holder(client=client, key=KEY).token == standby.token


def test_a_lease_needs_a_positive_ttl():
    with pytest.raises(ValueError, match="positive TTL"):
        LeaderLease(client=redis.Redis(), key=KEY, ttl_s=0)
