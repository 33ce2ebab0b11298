"""A real worker process killed (SIGKILL) while its delivery's request is in flight: after the lease the delivery is
sent again, with the same webhook-id, and nothing is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from apps.jobs import services as jobs
from apps.webhooks.delivery import deliver_webhooks
from apps.webhooks.models import AttemptStatus, Delivery, DeliveryStatus
from tests.jobs.factories import make_job

ROOT = Path(__file__).resolve().parents[2]


class HangingReceiver:
    """Answers nothing to its first request (the worker dies waiting); 200 to the others."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.first_arrived = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.ids.append(self.headers["webhook-id"])
                if len(receiver.ids) == 1:
                    receiver.first_arrived.set()
                    receiver.release.wait(30)
                    return
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@pytest.mark.postgres
def test_a_worker_process_killed_mid_request_loses_nothing(transactional_db, tenant_a, make_endpoint):
    receiver = HangingReceiver()
    receiver.thread.start()
    try:
        make_endpoint(tenant_a, receiver.url)
        jobs.job_events_record([(make_job(tenant_a, "train-k"), "Failed", "OOMKilled", "Warning")])
        db = connection.settings_dict
        env = {
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "GRYVIA_WEBHOOK_ALLOW_CIDRS": "127.0.0.0/8",
            "GRYVIA_WEBHOOK_LEASE_S": "4",
            "GRYVIA_WEBHOOK_TIMEOUT_S": "3",  # the lease must outlast one attempt
        }
        env.pop("REDIS_URL", None)
        code = "from apps.webhooks.delivery import deliver_webhooks; deliver_webhooks()"
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, start_new_session=True
        )
        try:
            assert receiver.first_arrived.wait(60), "the worker never sent the delivery"
            os.killpg(worker.pid, signal.SIGKILL)  # dies with the request in flight
        finally:
            worker.wait(timeout=30)
        receiver.release.set()
        delivery = Delivery.all_tenants.get()
        assert delivery.status != DeliveryStatus.SUCCEEDED and delivery.locked_until is not None
        assert deliver_webhooks().claimed == 0  # still leased to the dead worker
        time.sleep(max((delivery.locked_until.timestamp() - time.time()) + 0.2, 0))
        stats = deliver_webhooks()  # a restarted worker, after the lease
        assert (stats.claimed, stats.succeeded) == (1, 1)
    finally:
        receiver.release.set()
        receiver.server.shutdown()
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED
    assert receiver.ids == [delivery.message_id, delivery.message_id]  # the same id: receivers deduplicate
    log = list(delivery.attempt_log.values_list("number", "status"))
    assert log == [(1, AttemptStatus.ABANDONED), (2, AttemptStatus.SUCCEEDED)]
    assert settings.GRYVIA_WEBHOOK_LEASE_S  # the test process's own lease is untouched
