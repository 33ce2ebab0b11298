"""Three real `celery beat` processes on one Redis: each periodic task reaches the broker once per interval, sent by
the lease holder only, and when the leader stops the next beat takes over within one interval (SIGTERM: the lease
is released at once; SIGKILL: it runs out after GRYVIA_BEAT_LOCK_TTL_S)."""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.conf import settings

from apps.core import heartbeats, periodic
from apps.core.beat import LAST_SENT_KEY
from apps.core.leader import lease_holder

ROOT = Path(__file__).resolve().parents[2]
TTL_S = 3.0  # the standbys poll every second (a third of it)
SLACK_S = 1.0  # process wake-up and the broker poll below, on a busy machine
KEYS = ("celery", heartbeats.BEAT_LEASE_KEY, LAST_SENT_KEY, "gryvia:seen:beat")


@dataclass(frozen=True)
class Sent:
    at: float  # time.monotonic() when it reached the broker (within one poll)
    name: str
    pid: int  # of the beat that sent it


class Broker:
    """Takes every message off the Redis queue `celery` as it arrives (no worker runs), oldest first."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.sent: list[Sent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)

    def __enter__(self) -> Broker:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _drain(self) -> None:
        while not self._stop.is_set():
            while (raw := self.client.rpop("celery")) is not None:
                message = json.loads(raw)
                args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
                origin = message["headers"]["origin"]  # gen<pid>@<host>: the sending process
                self.sent.append(Sent(time.monotonic(), args[0], int(origin[3:].split("@")[0])))
            time.sleep(0.05)


def _start_beat(log: Path) -> subprocess.Popen:
    env = {**os.environ, "REDIS_URL": settings.REDIS_URL, "GRYVIA_BEAT_LOCK_TTL_S": str(TTL_S)}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gryvia_site", "beat", "--loglevel=info"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _leader_pid(client: redis.Redis) -> int | None:
    holder = lease_holder(client=client, key=heartbeats.BEAT_LEASE_KEY)
    return int(holder.token.split(":")[-2]) if holder else None  # host:pid:nonce


def _wait_for(what: str, predicate, timeout: float, logs: list[Path]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout} s\n" + "\n".join(p.read_text()[-3000:] for p in logs))


def _first_after(sent: list[Sent], name: str, t: float, *, not_from: int) -> Sent | None:
    """The first `name` seen after `t` from another beat than the one stopped then: a message the stopped beat
    sent just before its signal may reach the drainer (which polls) just after it. That it sent nothing later is
    the interleaving check's."""
    return next((s for s in sent if s.name == name and s.at > t and s.pid != not_from), None)


@pytest.mark.redis
def test_two_standbys_never_double_send_and_take_over_within_an_interval(tmp_path):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(*KEYS)
    intervals = {task.name: task.every for task in periodic.registry}
    logs = [tmp_path / f"beat-{i}.log" for i in range(3)]
    beats: dict[int, subprocess.Popen] = {}
    try:
        with Broker(client) as broker:
            for log in logs:
                proc = _start_beat(log)
                beats[proc.pid] = proc

            def all_up() -> int | None:
                seen = heartbeats.background(client=client).beats
                pids = {int(s.identity.split(":")[-2]) for s in seen}
                return _leader_pid(client) if pids == set(beats) else None

            first = _wait_for("three beats up, one of them leading", all_up, 40, logs)
            time.sleep(5)  # the steady state: one leader, two standbys

            stopped = time.monotonic()
            beats[first].send_signal(signal.SIGTERM)
            assert beats[first].wait(10) == 0
            second = _wait_for("a standby leading after SIGTERM", lambda: _leader_pid(client), 5, logs)
            time.sleep(max(0.0, stopped + 5 - time.monotonic()))

            killed = time.monotonic()
            os.killpg(second, signal.SIGKILL)
            beats[second].wait(10)
            third = _wait_for(
                "the last standby leading after SIGKILL",
                lambda: (pid := _leader_pid(client)) not in (None, second) and pid,
                TTL_S + 1 + SLACK_S,
                logs,
            )
            time.sleep(max(0.0, killed + intervals["reconcile-inference-services"] + 1.5 - time.monotonic()))
        sent = broker.sent
    finally:
        for proc in beats.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        client.delete(*KEYS)
    detail = "\n".join(f"{s.at - sent[0].at:7.2f} {s.name} {s.pid}" for s in sent) if sent else "nothing sent"

    # Only the lease holder ever sent: the senders follow one another, never interleaved.
    senders = [s.pid for i, s in enumerate(sent) if i == 0 or sent[i - 1].pid != s.pid]
    assert senders == [first, second, third], detail
    # Once per interval: no name reached the broker twice within one of its intervals, handovers included.
    for name, interval in intervals.items():
        times = [s.at for s in sent if s.name == name]
        assert all(b - a > interval - 0.5 for a, b in itertools.pairwise(times)), (name, detail)
    assert len([s for s in sent if s.name == "reconcile-jobs"]) >= 5, detail  # and it kept being sent

    # SIGTERM: the lease is released at once, so the next beat sends the 2 s tasks within their interval.
    for name in ("reconcile-jobs", "deliver-webhooks"):
        after = _first_after(sent, name, stopped, not_from=first)
        assert after is not None and after.pid == second and after.at <= stopped + intervals[name] + SLACK_S, detail
    # SIGKILL: the lease runs out after its TTL; a task whose interval exceeds the TTL and the poll keeps its pace.
    after = _first_after(sent, "reconcile-inference-services", killed, not_from=second)
    assert after is not None and after.pid == third, detail
    assert after.at <= killed + intervals["reconcile-inference-services"] + SLACK_S, detail
    after = _first_after(sent, "reconcile-jobs", killed, not_from=second)
    assert after is not None and after.at <= killed + TTL_S + 1 + intervals["reconcile-jobs"] + SLACK_S, detail
