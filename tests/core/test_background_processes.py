"""The production profile says which background processes it needs and whether they run: /readyz?verbose reports
the Celery workers and beats seen lately (a real worker appears and, stopped, disappears), and `serve` with
REDIS_URL names `make worker` and `make beat`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from apps.core import heartbeats
from apps.core.leader import LeaderLease

ROOT = Path(__file__).resolve().parents[2]
SEEN = ("gryvia:seen:worker", "gryvia:seen:beat", heartbeats.BEAT_LEASE_KEY)

pytestmark = pytest.mark.django_db


@pytest.fixture
def client():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(*SEEN)
    yield client
    client.delete(*SEEN)


def _verbose() -> dict:
    response = APIClient().get("/readyz?verbose")
    assert response.status_code == 200, response.json()  # missing background processes never make it unready
    return response.json()


@pytest.mark.redis
def test_readyz_verbose_warns_when_no_worker_or_beat_was_seen(client):
    body = _verbose()
    assert body["status"] == "ok" and body["problems"] == []
    assert body["background"] == {"workers": [], "beat": {"leader": None, "lease_s_left": None, "standbys": []}}
    assert body["warnings"] == [
        "no Celery worker seen in the last 15 s: start `make worker`",
        "no Celery beat holds the leader lease: start `make beat`",
    ]
    assert "background" not in APIClient().get("/readyz").json()  # the plain probe stays one ping


@pytest.mark.redis
def test_readyz_verbose_names_the_workers_the_beat_leader_and_its_standbys(client):
    leader = LeaderLease(client=client, key=heartbeats.BEAT_LEASE_KEY, ttl_s=30)
    standby = LeaderLease(client=client, key=heartbeats.BEAT_LEASE_KEY, ttl_s=30)
    assert leader.try_acquire() and not standby.try_acquire()
    for token in (leader.token, standby.token):
        heartbeats.touch(client=client, role=heartbeats.BEAT, identity=token)
    heartbeats.touch(client=client, role=heartbeats.WORKER, identity="celery@a (pid 1)")
    # A worker last seen a minute ago (by Redis's clock) has stopped: it is dropped, not reported.
    now = client.time()
    client.zadd("gryvia:seen:worker", {"celery@b (pid 2)": now[0] - 60})

    body = _verbose()
    assert body["warnings"] == []
    assert [w["id"] for w in body["background"]["workers"]] == ["celery@a (pid 1)"]
    assert 0 <= body["background"]["workers"][0]["seen_s_ago"] < 5
    beat = body["background"]["beat"]
    assert beat["leader"] == leader.token and 25 < beat["lease_s_left"] <= 30
    assert beat["standbys"] == [standby.token]

    leader.release()
    assert _verbose()["warnings"] == ["no Celery beat holds the leader lease: start `make beat`"]


def test_readyz_verbose_without_redis_reports_no_background(settings):
    settings.REDIS_URL = ""  # the embedded profile: the ticker in the server does the periodic work
    body = APIClient().get("/readyz?verbose").json()
    assert "background" not in body and "warnings" not in body


def _env() -> dict[str, str]:
    return {**os.environ, "REDIS_URL": settings.REDIS_URL, "PYTHONUNBUFFERED": "1"}


@pytest.mark.redis
def test_a_real_worker_is_seen_while_it_runs_and_forgotten_when_stopped(client, tmp_path):
    log = tmp_path / "worker.log"
    # A queue of its own: it must not run the periodic tasks other tests leave on the default queue.
    command = ["-m", "celery", "-A", "gryvia_site", "worker", "--pool=solo", "-Q", "gryvia-test-heartbeat", "-n"]
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, *command, "heartbeat-test@%h", "--loglevel=info"],
            cwd=ROOT,
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 40
        ids: list[str] = []
        while time.monotonic() < deadline and not ids:
            ids = [w["id"] for w in _verbose()["background"]["workers"]]
            time.sleep(0.2)
        assert ids == [f"heartbeat-test@{socket.gethostname()} (pid {worker.pid})"], log.read_text()[-3000:]
        assert not any("worker" in w for w in _verbose()["warnings"])
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
    assert _verbose()["background"]["workers"] == []  # at once, not after the 15 s window


@pytest.mark.redis
def test_serve_with_redis_says_that_worker_and_beat_are_needed(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    answered = False
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and server.poll() is None and not answered:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    answered = response.status == 200
            except OSError:
                time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
    assert answered and "Gryvia stopped" in output, output[-3000:]
    assert "Run `make worker` and `make beat` beside it" in output, output[-3000:]
