"""Jobs across real restarts (issue 26, item 1): `make run`'s server stopped and started mid-job (embedded
profile), and a Celery worker stopped by SIGTERM and by SIGKILL (production profile, PostgreSQL and Redis).

In each, the job's processes die with the process that ran them, the job runs again from its checkpoint when
Gryvia comes back (attempt 2, then 3), it finishes, no usage record stays open, and nothing ran twice at once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from apps.billing.models import UsageRecord
from apps.cluster.backends import set_backend
from apps.cluster.backends.local import LocalBackend
from apps.jobs import services
from apps.jobs.logs import job_logs
from tests.factories import ACTOR

from .restarts import (
    PYTHON,
    attempts,
    checkpointing_job,
    free_port,
    gone,
    kill_session,
    latest_step,
    processes_in,
    start,
    stop,
    wait_for,
)

EMBEDDED = not os.environ.get("DATABASE_URL")


def _api(base: str, key: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        base + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


@pytest.mark.skipif(
    not EMBEDDED,
    reason="the embedded profile's own test (its server runs on SQLite whatever the suite's profile): run once",
)
def test_make_run_stopped_mid_job_by_sigterm_then_sigkill_resumes_the_job_from_its_checkpoint(tmp_path):
    data, port = tmp_path / "var", free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(GRYVIA_DATA_DIR=str(data), GRYVIA_PORT=str(port), GRYVIA_JOB_TTL_S="600")
    log = tmp_path / "serve.log"
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput"], cwd=settings.BASE_DIR, env=env, check=True, capture_output=True
    )
    subprocess.run([PYTHON, "manage.py", "bootstrap"], cwd=settings.BASE_DIR, env=env, check=True, capture_output=True)
    key = json.loads((data / "demo-credentials.json").read_text())["api_key"]
    base = f"http://127.0.0.1:{port}"
    serve = [PYTHON, "manage.py", "serve"]

    def job() -> dict:
        return _api(base, key, "GET", "/api/v1/jobs/steps/")

    def ready() -> bool:
        try:
            return urllib.request.urlopen(base + "/healthz", timeout=2).status == 200
        except OSError:
            return False

    server = start(serve, env=env, log=log)
    try:
        wait_for("the server", ready, log=log)
        _api(base, key, "POST", "/api/v1/jobs/", checkpointing_job("steps", retry_limit=2))
        namespace = "tenant-demo"
        # SIGTERM (a process manager's stop), then SIGKILL (a crash): each time the job's process dies with the
        # server, and the next server runs the job again from where its checkpoint says.
        for sig, attempt in ((signal.SIGTERM, 1), (signal.SIGKILL, 2)):
            wait_for(
                f"attempt {attempt} past step {3 * attempt}",
                lambda a=attempt: (
                    len(attempts(data, namespace)) == a
                    and latest_step(data, namespace) >= 3 * a
                    and job()["status"]["phase"] == "Running"
                ),
                log=log,
            )
            pid = attempts(data, namespace)[-1][0]
            stop(server, sig)
            assert gone([pid]), f"the job's process {pid} outlived the server ({signal.Signals(sig).name})"
            server = start(serve, env=env, log=log)
            wait_for("the server again", ready, log=log)
        final = wait_for(
            "the job's end",
            lambda: job()["status"]["phase"] in ("Succeeded", "Failed") and job(),
            timeout=90,
            log=log,
        )
        # One runtime per packaged model for the installation, whatever the restarts (when `make models` ran).
        runtimes = [cmd for cmd in processes_in(data).values() if "llama_cpp" in cmd or "embedding_server" in cmd]
        assert len(runtimes) == len(set(runtimes)), runtimes
        stop(server, signal.SIGTERM)
        assert not processes_in(data), "a process of the installation outlived its server"
    finally:
        kill_session(server)
    status = final["status"]
    assert status["phase"] == "Succeeded", status
    assert status["attempts"] == 3
    runs = attempts(data, namespace)
    assert [step for _pid, step in runs][0] == 0 and all(step > 0 for _pid, step in runs[1:]), runs  # resumed
    with sqlite3.connect(data / "gryvia.sqlite3") as db:
        records = db.execute("SELECT final FROM billing_usagerecord WHERE job_name = 'steps' ORDER BY id").fetchall()
        events = [
            r
            for (r,) in db.execute(
                "SELECT e.reason FROM jobs_jobevent e JOIN jobs_job j ON j.id = e.job_id"
                " WHERE j.name = 'steps' ORDER BY e.id"
            )
        ]
    assert records == [(1,), (1,), (1,)], records  # one run per attempt, every one closed
    assert events.count("WorkloadLost") == 2 and events[-1] == "Succeeded", events
    assert gone([pid for pid, _step in runs], timeout=1)


def _database_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_stopped_by_sigterm_then_sigkill_mid_job_resumes_the_job_from_its_checkpoint(
    tmp_path, tenant_a
):
    """The production profile with the local backend: a real worker and beat on the suite's PostgreSQL and Redis;
    this process reads the job's logs as the web server does, from what the worker's node publishes."""
    data = tmp_path / "var"
    env = {**os.environ, "DATABASE_URL": _database_url(), "REDIS_URL": settings.REDIS_URL}
    env.update(GRYVIA_DATA_DIR=str(data), GRYVIA_JOB_TTL_S="600", GRYVIA_BEAT_LOCK_TTL_S="3")
    celery = [str(Path(PYTHON).parent / "celery"), "-A", "gryvia_site"]
    worker_argv = [*celery, "worker", "--loglevel=info", "--concurrency=2"]
    log = tmp_path / "worker.log"
    spec = checkpointing_job("steps", retry_limit=2)["spec"]
    job = services.job_create(actor=ACTOR, tenant=tenant_a, name="steps", spec=spec)
    web = LocalBackend(data_dir=data, node=True)  # what the web server's get_backend() is: a reader of the node
    set_backend(web)
    namespace = tenant_a.namespace

    def phase() -> str:
        job.refresh_from_db()
        return job.phase

    beat = start([*celery, "beat", "--loglevel=info"], env=env, log=tmp_path / "beat.log")
    worker = start(worker_argv, env=env, log=log)
    try:
        for sig, attempt in ((signal.SIGTERM, 1), (signal.SIGKILL, 2)):
            wait_for(
                f"attempt {attempt} past step {3 * attempt}",
                lambda a=attempt: (
                    len(attempts(data, namespace)) == a
                    and latest_step(data, namespace) >= 3 * a
                    and phase() == "Running"
                ),
                log=log,
            )
            if attempt == 1:  # the logs the worker's pod writes, read here as the web server reads them
                assert "[0] starting at step 0\n" in job_logs(job)
            pid = attempts(data, namespace)[-1][0]
            stop(worker, sig)
            assert gone([pid]), f"the job's process {pid} outlived the worker ({signal.Signals(sig).name})"
            assert phase() == "Running"  # nobody has looked yet
            worker = start(worker_argv, env=env, log=log)
        wait_for("the job's end", lambda: phase() in ("Succeeded", "Failed"), timeout=90, log=log)
        stop(worker, signal.SIGTERM)
        stop(beat, signal.SIGTERM)
        assert not processes_in(data), "a process of the installation outlived its worker"
    finally:
        kill_session(worker)
        kill_session(beat)
        set_backend(None)
    assert (job.phase, job.attempts) == ("Succeeded", 3), job.message
    runs = attempts(data, namespace)
    assert runs[0][1] == 0 and all(step > 0 for _pid, step in runs[1:]), runs  # each attempt resumed
    assert list(job.events.filter(reason="WorkloadLost").values_list("reason", flat=True)) == ["WorkloadLost"] * 2
    records = UsageRecord.all_tenants.filter(job_pk=job.pk)
    assert [r.final for r in records] == [True, True, True]
