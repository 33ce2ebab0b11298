"""Jobs end to end on the local backend: real processes, logs, timeout, cancel, GPUs, resize, recovery, inference."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from collections.abc import Callable

import pytest

from apps.cluster.backends.local.pods import group_alive
from apps.jobs import services
from apps.jobs.api.serializers import queued_message
from apps.jobs.logs import job_logs, job_pods
from apps.jobs.models import Job
from apps.jobs.reconciler import reconcile_jobs
from tests.factories import ACTOR
from tests.jobs.factories import HELLO_YAML, make_job

PID = "gryvia.io/local-pid"


def drive(job: Job, until: Callable[[Job], bool], timeout: float = 60.0, backend=None) -> Job:
    """Run reconcile passes (as the ticker does) until `until(job)`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconcile_jobs(backend)
        job.refresh_from_db()
        if until(job):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job.name} is {job.phase} ({job.reason}: {job.message}) after {timeout}s")


def pids(job: Job) -> list[int]:
    return [
        int(p["metadata"]["annotations"][PID]) for p in job_pods(job) if PID in p["metadata"].get("annotations", {})
    ]


def live_pids(job: Job) -> list[int]:
    return [pid for pid in pids(job) if group_alive(pid)]


@pytest.mark.django_db
def test_hello_reaches_succeeded_and_logs_each_rank(local, client_a):
    response = client_a.generic("POST", "/api/v1/jobs/", HELLO_YAML, content_type="application/yaml")
    assert response.status_code == 201
    job = drive(Job.all_tenants.get(name="hello"), lambda j: j.is_terminal)
    assert job.phase == "Succeeded", job.message
    text = client_a.get("/api/v1/jobs/hello/logs/").content.decode()
    assert "[0] rank 0 world 2\n" in text and "[1] rank 1 world 2\n" in text
    assert client_a.get("/api/v1/jobs/hello/logs/?index=1").content.decode() == "[1] rank 1 world 2\n"
    reasons = [e["reason"] for e in client_a.get("/api/v1/jobs/hello/events/").json()["results"]]
    assert reasons[0] == "Submitted" and reasons[-1] == "Succeeded"
    assert job.start_time and job.completion_time and job.attempts == 1 and job.restarts == {"0": 0, "1": 0}
    for _ in range(3):  # the finished job keeps its pods, so their logs stay readable until the TTL
        reconcile_jobs()
    assert "[1] rank 1 world 2\n" in client_a.get("/api/v1/jobs/hello/logs/").content.decode()


@pytest.mark.django_db
def test_a_3s_timeout_fails_with_deadline_exceeded_and_leaves_no_process(local, tenant_a):
    job = make_job(tenant_a, "slow", timeout="3s", command=["python3", "-c", "import time; time.sleep(60)"])
    job = drive(job, lambda j: j.phase == "Running")
    started = pids(job)
    assert len(started) == 2
    job = drive(job, lambda j: j.is_terminal, timeout=30)
    assert job.phase == "Failed" and job.reason == "DeadlineExceeded", job.message
    time.sleep(0.5)
    assert not [pid for pid in started if group_alive(pid)]


@pytest.mark.django_db
def test_cancel_asks_for_a_checkpoint_then_stops_everything_after_the_grace(local, tenant_a, tmp_path):
    marker = tmp_path / "checkpoint-requested"
    script = (
        "import signal, time, pathlib\n"
        f"def ask(*_): pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "signal.signal(signal.SIGUSR1, ask)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # a stubborn trainer: only SIGKILL ends it
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.1)\n"
    )
    job = make_job(
        tenant_a,
        "stop",
        command=["python3", "-c", script],
        storage="standard",
        checkpoint={"dir": "/data/ckpt", "preStopGraceSeconds": 5},
    )
    job = drive(job, lambda j: j.phase == "Running" and len(live_pids(j)) == 2)
    started = pids(job)
    services.job_cancel(actor=ACTOR, job=job)
    job = drive(job, lambda j: j.reason == "Cancelling", timeout=10)  # checkpoint request sent, grace running
    assert job.phase == "Running" and [pid for pid in started if group_alive(pid)]
    job = drive(job, lambda j: j.is_terminal, timeout=30)  # grace 5 s, then SIGTERM (ignored), then SIGKILL
    assert job.phase == "Cancelled"
    assert not [pid for pid in started if group_alive(pid)]  # Cancelled only once nothing of it runs
    assert marker.read_text() == "yes"


@pytest.mark.django_db
def test_more_gpus_than_exist_waits_with_the_reason(local, tenant_a, monkeypatch):
    monkeypatch.setenv("GRYVIA_LOCAL_GPUS", "2")
    job = make_job(tenant_a, "greedy", gpus=4, distributed={"enabled": False})
    job = drive(job, lambda j: j.reason == "InsufficientGPUs", timeout=10)
    assert job.phase == "Queued" and job.queue_position == 1
    assert job.message == "waiting for 4 nvidia.com/gpu: the cluster has 2 nvidia.com/gpu"
    assert queued_message(job) == f"{job.message}; position 1 of 1"  # the position is read, as the API shows it
    assert job_pods(job) == []
    fits = make_job(
        tenant_a,
        "fits",
        gpus=2,
        distributed={"enabled": False},
        command=["python3", "-c", "import os; print('gpus', os.environ['CUDA_VISIBLE_DEVICES'])"],
    )
    fits = drive(fits, lambda j: j.is_terminal)
    assert fits.phase == "Succeeded" and "[0] gpus 0,1" in job_logs(fits)
    assert fits.gpus_simulated  # shown as simulated wherever the job is shown


@pytest.mark.django_db
def test_elastic_resize_changes_the_live_process_count(local, tenant_a):
    job = make_job(
        tenant_a,
        "elastic",
        command=["python3", "-c", "import time; time.sleep(120)"],
        distributed={"enabled": True, "nodes": 2, "elastic": {"minNodes": 1}},
    )
    job = drive(job, lambda j: j.phase == "Running" and len(live_pids(j)) == 2)
    for nodes in (1, 2):
        services.job_resize(actor=ACTOR, job=job, nodes=nodes)
        job = drive(job, lambda j, n=nodes: j.current_nodes == n and len(live_pids(j)) == n, timeout=30)
        assert job.typed_spec.desired_nodes == nodes
    assert {c["type"] for c in job.conditions} >= {"Resized"}
    services.job_cancel(actor=ACTOR, job=job)
    drive(job, lambda j: j.is_terminal)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_killed_rank_restarts_the_group_which_resumes_from_the_last_commit(local, tenant_a, live_server, settings):
    settings.GRYVIA_INTERNAL_API_URL = live_server.url  # the trainers report their commits here
    job = services.job_create(
        actor=ACTOR,
        tenant=tenant_a,
        name="ddp",
        spec={
            "type": "training",
            "image": "pytorch",
            "distributed": {"enabled": True, "nodes": 2, "backend": "gloo"},
            "retryLimit": 1,
            "timeout": "5m",
            "storage": "standard",
            "checkpoint": {"dir": "/data/checkpoints", "interval": 5, "preStopGraceSeconds": 10},
            "command": ["python3", "-m", "examples.training.ddp", "--steps", "60", "--step-sleep", "0.1"],
        },
    )
    job = drive(job, lambda j: (j.last_checkpoint_step or 0) >= 10, timeout=120)
    committed_at_kill = job.last_checkpoint_step
    victim = next(
        p for p in job_pods(job) if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
    )
    os.killpg(int(victim["metadata"]["annotations"][PID]), signal.SIGKILL)
    job = drive(job, lambda j: j.is_terminal, timeout=180)
    assert job.phase == "Succeeded", job.message
    assert job.attempts == 2 and job.restarts == {"0": 1, "1": 1}
    text = job_logs(job)
    resumed = [int(s) for s in re.findall(r"rank 0 resumed from step (\d+)", text)]
    assert resumed and resumed[0] >= committed_at_kill > 0  # not from zero
    losses = [float(x) for x in re.findall(r"\[0\] rank 0 step \d+ loss ([0-9.]+)", text)]
    assert losses[-1] < losses[0]
    assert "rank 0 done step 60" in text and "rank 1 done step 60" in text
    assert job.last_checkpoint_step == 60


@pytest.mark.slow
@pytest.mark.django_db
def test_the_inference_example_serves_http(local, tenant_a):
    job = services.job_create(
        actor=ACTOR,
        tenant=tenant_a,
        name="serve",
        spec={
            "type": "inference",
            "image": "pytorch",
            "port": 8000,
            "command": ["python3", "-m", "examples.training.serve"],
        },
    )
    job = drive(job, lambda j: j.phase == "Running" and j.endpoint, timeout=60)
    assert job.endpoint.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(f"{job.endpoint}/healthz", timeout=5) as response:
        assert json.load(response)["status"] == "ok"
    request = urllib.request.Request(
        f"{job.endpoint}/predict",
        data=json.dumps({"x": [0.1] * 8}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert len(json.load(response)["y"]) == 1
    services.job_cancel(actor=ACTOR, job=job)
    job = drive(job, lambda j: j.is_terminal)
    assert job.phase == "Cancelled"


@pytest.mark.django_db
def test_preemption_asks_the_victim_to_checkpoint_first(local, tenant_a, tmp_path, monkeypatch):
    from apps.queueing import services as queueing

    monkeypatch.setenv("GRYVIA_LOCAL_GPUS", "1")
    queueing.queue_create(actor=ACTOR, tenant=tenant_a, name="q", quotas=[{"resource": "nvidia.com/gpu", "nominal": 1}])
    marker = tmp_path / "asked"
    script = (
        "import signal, sys, time, pathlib\n"
        f"def ask(*_): pathlib.Path({str(marker)!r}).write_text('checkpoint'); sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, ask)\n"
        "while True: time.sleep(0.1)\n"
    )
    common = {"gpus": 1, "queueName": "q", "distributed": {"enabled": False}, "storage": "standard"}
    low = make_job(tenant_a, "low", command=["python3", "-c", script], checkpoint={"dir": "/data/ckpt"}, **common)
    low = drive(low, lambda j: j.phase == "Running" and live_pids(j))
    high = make_job(tenant_a, "high", priority=90, command=["python3", "-c", "print('high ran')"], **common)
    high = drive(high, lambda j: j.phase == "Succeeded", timeout=60)
    low.refresh_from_db()
    assert marker.read_text() == "checkpoint"  # asked to checkpoint before it was stopped
    assert low.phase in ("Queued", "Scheduling", "Running") and low.attempts >= 1
    assert list(low.events.filter(reason__in=["Preempted", "Requeued"]).values_list("reason", flat=True)) == [
        "Preempted",
        "Requeued",
    ]
    services.job_cancel(actor=ACTOR, job=low)
    drive(low, lambda j: j.is_terminal)


@pytest.mark.django_db(transaction=True)  # the follower reads the job from other threads, as under ASGI
def test_following_logs_streams_lines_while_the_job_runs_and_ends_with_it(local, tenant_a):
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connection

    from apps.jobs.logs import follow_job_logs

    script = "import time\nfor i in range(8):\n    print('tick', i, flush=True)\n    time.sleep(0.4)\n"
    job = make_job(tenant_a, "ticker", distributed={"enabled": False}, command=["python3", "-c", script])
    drive(job, lambda j: j.phase == "Running")
    job = Job.all_tenants.select_related("tenant").get(pk=job.pk)  # as the view's get_object() loads it

    def phase() -> str:
        return Job.all_tenants.get(pk=job.pk).phase

    async def run() -> list[tuple[str, str]]:
        arrived: list[tuple[str, str]] = []

        async def reconcile_until_done() -> None:  # the ticker's part
            while await sync_to_async(phase)() not in ("Succeeded", "Failed"):
                await sync_to_async(reconcile_jobs)()
                await asyncio.sleep(0.2)

        ticker = asyncio.create_task(reconcile_until_done())
        try:
            async for chunk in follow_job_logs(job):
                arrived.append((chunk, await sync_to_async(phase)()))
            await asyncio.wait_for(ticker, 30)
        finally:
            await sync_to_async(lambda: connection.close())()  # the sync thread's own, as a request's end closes it
        return arrived

    arrived = asyncio.run(asyncio.wait_for(run(), 60))
    text = "".join(chunk for chunk, _ in arrived)
    assert text == "".join(f"[0] tick {i}\n" for i in range(8))  # every line once, in order, then the stream ends
    assert len(arrived) >= 3 and arrived[0][1] == "Running"  # it came in pieces while the job ran
    assert phase() == "Succeeded"
