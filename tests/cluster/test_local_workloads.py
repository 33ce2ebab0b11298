"""The local backend runs Jobs and StatefulSets as real local processes (short `python3 -c` commands), keeping Pods
and `status` as Kubernetes reports them. The last two tests cover the KubernetesBackend side of the same protocol
change (delete options, streamed logs) against kmock.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apps.cluster.backends.base import JOB, NAMESPACE, NODE, POD, STATEFUL_SET, ConflictError, ObjectRef
from apps.cluster.backends.local import LocalBackend
from apps.cluster.backends.local import pods as local_pods
from apps.cluster.backends.local.pods import group_alive
from apps.jobs.manifests import token_secret, workload
from apps.jobs.spec import JobSpec, normalize_spec

NS = "team"
SLEEP = ["python3", "-c", "import time; time.sleep(60)"]


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    be = LocalBackend(data_dir=tmp_path / "data")
    be.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield be
    be.close()


def build(name: str, command: list[str], *, nodes: int = 1, kind: str = "training", **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"type": kind, "image": "python:3.11-slim", "command": command, **extra}
    if nodes > 1:
        raw["distributed"] = {"enabled": True, "nodes": nodes, "backend": "gloo"}
    spec = JobSpec.of(normalize_spec(raw))
    return workload(spec, name=name, namespace=NS, uid=f"uid-{name}", tenant="acme", api_url="http://127.0.0.1:8000")


def run(backend: LocalBackend, manifest: dict[str, Any]) -> dict[str, Any]:
    """Apply the job's token Secret, then its workload (as the reconciler does)."""
    name, ns = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    spec = JobSpec.of(normalize_spec({"type": "training", "image": "x"}))
    backend.apply(token_secret(spec, name=name, namespace=ns, uid=f"uid-{name}", tenant="acme", token="t0ken"))
    return backend.apply(manifest)


def wait_for(what: Callable[[], Any], timeout: float = 10.0, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message or what}")


def job(backend: LocalBackend, name: str) -> dict[str, Any]:
    return backend.get(ObjectRef(JOB, name, NS))


def condition(backend: LocalBackend, name: str, kind: str) -> dict[str, Any] | None:
    conditions = (job(backend, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def pods(backend: LocalBackend, name: str) -> dict[str, dict[str, Any]]:
    found = backend.list(POD, label_selector=f"gryvia.io/job={name}", namespace=NS)
    return {p["metadata"]["name"]: p for p in found}


def phases(backend: LocalBackend, name: str) -> dict[str, str]:
    return {n: p["status"]["phase"] for n, p in pods(backend, name).items()}


def running_pids(backend: LocalBackend, name: str) -> set[int]:
    """Process groups of the pods now Running (their pid is their group id)."""
    return {
        int(p["metadata"]["annotations"]["gryvia.io/local-pid"])
        for p in pods(backend, name).values()
        if p["status"]["phase"] == "Running" and "gryvia.io/local-pid" in p["metadata"]["annotations"]
    }


def live(pids: set[int]) -> set[int]:
    return {pid for pid in pids if group_alive(pid)}


def test_two_node_hello_job_completes_with_its_environment_and_logs(backend: LocalBackend) -> None:
    script = (
        "import os; e = os.environ; print(e['RANK'], e['WORLD_SIZE'], e['MASTER_ADDR'], e['MASTER_PORT'], "
        "e['JOB_COMPLETION_INDEX'], e['GRYVIA_JOB_TOKEN'], e['GRYVIA_CHECKPOINT_DIR'], os.getcwd())"
    )
    run(backend, build("hello", ["python3", "-c", script], nodes=2, storage="standard", checkpoint={}))
    wait_for(lambda: condition(backend, "hello", "Complete"), message="Complete")
    status = job(backend, "hello")["status"]
    assert status["succeeded"] == 2 and status["completedIndexes"] == "0-1" and status["completionTime"]
    assert condition(backend, "hello", "SuccessCriteriaMet") and "failed" not in status and "active" not in status
    assert phases(backend, "hello") == {"hello-0-1": "Succeeded", "hello-1-1": "Succeeded"}
    pod = pods(backend, "hello")["hello-1-1"]
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "hello"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert pod["metadata"]["labels"]["gryvia.io/attempt"] == "1"
    assert pod["spec"]["nodeName"] == "local" and pod["status"]["podIP"] == "127.0.0.1"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    volume = backend.data_dir / "volumes" / NS / "hello-data"
    lines = [backend.pod_logs(namespace=NS, pod=f"hello-{i}-1").split() for i in (0, 1)]
    assert [line[0] for line in lines] == ["0", "1"] and {line[1] for line in lines} == {"2"}
    assert {line[2] for line in lines} == {"127.0.0.1"}
    ports = {line[3] for line in lines}
    assert len(ports) == 1 and ports != {"29500"} and int(ports.pop()) > 0
    assert [line[4] for line in lines] == ["0", "1"] and {line[5] for line in lines} == {"t0ken"}
    assert {line[6] for line in lines} == {str(volume / "checkpoints")} and {line[7] for line in lines} == {str(volume)}


def test_a_failed_rank_restarts_the_whole_group_once(backend: LocalBackend, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    script = (
        "import os, pathlib, sys; m = pathlib.Path(os.environ['MARKER'])\n"
        "if os.environ['RANK'] == '1' and not m.exists(): m.write_text('x'); sys.exit(3)"
    )
    run(backend, build("group", ["python3", "-c", script], nodes=2, retryLimit=1, env={"MARKER": str(marker)}))
    wait_for(lambda: condition(backend, "group", "Complete"), message="Complete")
    assert job(backend, "group")["status"]["failed"] == 1
    seen = phases(backend, "group")
    assert seen["group-1-1"] == "Failed" and seen["group-0-2"] == seen["group-1-2"] == "Succeeded"
    failed = pods(backend, "group")["group-1-1"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert failed["exitCode"] == 3


def test_an_elastic_job_restarts_only_the_failed_index(backend: LocalBackend, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    script = (
        "import os, pathlib, sys, time; m = pathlib.Path(os.environ['MARKER'])\n"
        "if os.environ['RANK'] == '1':\n"
        "    if not m.exists(): m.write_text('x'); sys.exit(3)\n"
        "    time.sleep(60)\n"
        "while not m.exists(): time.sleep(0.05)\n"
        "time.sleep(0.5)"
    )
    manifest = build("flex", ["python3", "-c", script], nodes=2, retryLimit=2, env={"MARKER": str(marker)})
    manifest["spec"]["successPolicy"] = {"rules": [{"succeededCount": 1}]}  # as for distributed.elastic
    run(backend, manifest)
    done = wait_for(lambda: condition(backend, "flex", "Complete"), message="Complete")
    assert done["reason"] == "SuccessPolicy" and job(backend, "flex")["status"]["failed"] == 1
    assert phases(backend, "flex") == {"flex-0-1": "Succeeded", "flex-1-1": "Failed", "flex-1-2": "Failed"}
    stopped = pods(backend, "flex")["flex-1-2"]["status"]["conditions"]
    assert any(c["type"] == "DisruptionTarget" for c in stopped)  # stopped once the success policy was met


def test_retries_used_up_fail_the_job(backend: LocalBackend) -> None:
    run(backend, build("doomed", ["python3", "-c", "raise SystemExit(1)"], retryLimit=1))
    failed = wait_for(lambda: condition(backend, "doomed", "Failed"), message="Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and failed["message"]
    assert condition(backend, "doomed", "FailureTarget") and not condition(backend, "doomed", "Complete")
    assert job(backend, "doomed")["status"]["failed"] == 2
    assert phases(backend, "doomed") == {"doomed-0-1": "Failed", "doomed-0-2": "Failed"}


def test_the_active_deadline_stops_everything(backend: LocalBackend) -> None:
    run(backend, build("slow", SLEEP, nodes=2, timeout="2s"))
    pids = wait_for(lambda: len(running_pids(backend, "slow")) == 2 and running_pids(backend, "slow"))
    failed = wait_for(lambda: condition(backend, "slow", "Failed"), timeout=10, message="DeadlineExceeded")
    assert failed["reason"] == "DeadlineExceeded"
    assert not live(pids) and set(phases(backend, "slow").values()) == {"Failed"}


def test_delete_asks_for_a_checkpoint_then_terminates_then_kills(
    backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_pods, "SIGTERM_WAIT_S", 1.0)
    script = (
        "import os, pathlib, signal, sys, time\n"
        "out, i = pathlib.Path(os.environ['OUT']), os.environ['JOB_COMPLETION_INDEX']\n"
        "def note(event):\n"
        "    with open(out / f'{i}.events', 'a') as f: f.write(event + '\\n')\n"
        "def usr1(*_):\n"
        "    note('usr1')\n"
        "    if i == '0': sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, usr1)\n"
        "signal.signal(signal.SIGTERM, lambda *_: note('term'))\n"
        "(out / f'{i}.ready').write_text('')\n"
        "while True: time.sleep(0.05)\n"
    )
    manifest = build(
        "ckpt", ["python3", "-c", script], nodes=2, storage="std", checkpoint={}, env={"OUT": str(tmp_path)}
    )
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    run(backend, manifest)
    wait_for(lambda: (tmp_path / "0.ready").exists() and (tmp_path / "1.ready").exists(), message="handlers")
    pids = running_pids(backend, "ckpt")
    started = time.monotonic()
    assert backend.delete(ObjectRef(JOB, "ckpt", NS)) is True
    assert time.monotonic() - started < 0.5  # background propagation: the sequence runs on its own
    wait_for(lambda: not live(pids) and not pods(backend, "ckpt"), timeout=10, message="pods gone")
    assert (tmp_path / "0.events").read_text().split() == ["usr1"]
    assert (tmp_path / "1.events").read_text().split() == ["usr1", "term"]  # ignored SIGTERM, then SIGKILL
    request = backend.data_dir / "volumes" / NS / "ckpt-data" / "checkpoints" / ".checkpoint-request"
    assert json.loads(request.read_text())["reason"] == "WorkloadDeleted"


def test_resize_starts_and_stops_the_highest_indexes(backend: LocalBackend) -> None:
    manifest = build("elastic", SLEEP, nodes=2)
    run(backend, manifest)
    first = wait_for(lambda: len(running_pids(backend, "elastic")) == 2 and running_pids(backend, "elastic"))
    smaller = copy.deepcopy(manifest)
    smaller["spec"].update(parallelism=1, completions=1)
    backend.apply(smaller)
    wait_for(lambda: len(live(first)) == 1 and set(pods(backend, "elastic")) == {"elastic-0-1"}, message="1 pod")
    backend.apply(manifest)
    wait_for(lambda: len(running_pids(backend, "elastic")) == 2, message="2 pods again")
    assert set(pods(backend, "elastic")) == {"elastic-0-1", "elastic-1-2"}
    everything = first | running_pids(backend, "elastic")
    assert len(live(everything)) == 2
    backend.delete(ObjectRef(JOB, "elastic", NS))
    wait_for(lambda: not live(everything), message="no process")


def test_gpus_are_assigned_and_a_pod_waits_for_free_ones(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRYVIA_LOCAL_GPUS", "2")
    assert backend.list(NODE)[0]["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    show = "import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep({})"
    run(backend, build("one", ["python3", "-c", show.format(60)], gpus=1))
    wait_for(lambda: backend.pod_logs(namespace=NS, pod="one-0-1") if running_pids(backend, "one") else "")
    assert backend.pod_logs(namespace=NS, pod="one-0-1").strip() == "0"
    run(backend, build("two", ["python3", "-c", show.format(0)], gpus=2))
    waiting = wait_for(lambda: pods(backend, "two").get("two-0-1"))
    scheduled = waiting["status"]["conditions"][0]
    assert waiting["status"]["phase"] == "Pending" and "nodeName" not in waiting["spec"]
    assert scheduled["type"] == "PodScheduled" and scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable" and "Insufficient nvidia.com/gpu" in scheduled["message"]
    backend.delete(ObjectRef(JOB, "one", NS))
    wait_for(lambda: condition(backend, "two", "Complete"), message="two runs once one is gone")
    assert backend.pod_logs(namespace=NS, pod="two-0-1").strip() == "0,1"


def test_an_inference_stateful_set_becomes_ready_and_serves_http(backend: LocalBackend) -> None:
    server = ["/bin/sh", "-c", 'exec python3 -m http.server "$PORT" --bind 127.0.0.1']
    manifest = build("serve", server, kind="inference", port=8000)
    run(backend, manifest)
    ref = ObjectRef(STATEFUL_SET, "serve", NS)
    status = wait_for(lambda: (backend.get(ref).get("status") or {}).get("readyReplicas") == 1 and backend.get(ref))
    endpoint = status["status"]["endpoint"]
    pod = backend.get(ObjectRef(POD, "serve-0", NS))
    assert endpoint == f"http://127.0.0.1:{pod['metadata']['annotations']['gryvia.io/local-port']}" != "8000"
    assert pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "0"
    assert pod["status"]["phase"] == "Running" and pod["status"]["containerStatuses"][0]["ready"] is True
    with urllib.request.urlopen(endpoint + "/", timeout=5) as response:
        assert response.status == 200
    manifest["spec"]["replicas"] = 2
    backend.apply(manifest)
    wait_for(lambda: backend.get(ref)["status"]["readyReplicas"] == 2, message="2 replicas ready")
    ports = {p["metadata"]["annotations"]["gryvia.io/local-port"] for p in pods(backend, "serve").values()}
    assert len(ports) == 2 and backend.get(ref)["status"]["endpoint"] == endpoint
    pids = running_pids(backend, "serve")
    assert len(pids) == 2
    backend.delete(ref)
    wait_for(lambda: not live(pids) and not pods(backend, "serve"), message="server stopped")


def test_a_stateful_set_pod_restarts_in_place(backend: LocalBackend) -> None:
    run(backend, build("flaky", ["python3", "-c", "print('up')"], kind="inference"))
    ref = ObjectRef(POD, "flaky-0", NS)

    def restarts() -> int:
        pod = pods(backend, "flaky").get("flaky-0") or {}
        return ((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("restartCount", 0)

    wait_for(lambda: restarts() >= 1, timeout=5, message="a restart")
    pod = backend.get(ref)
    assert pod["status"]["phase"] == "Running" and pod["metadata"]["labels"]["gryvia.io/attempt"] == "1"
    wait_for(lambda: backend.pod_logs(namespace=NS, pod="flaky-0").count("up") >= 2, message="both runs logged")
    backend.delete(ObjectRef(STATEFUL_SET, "flaky", NS))
    wait_for(lambda: not pods(backend, "flaky"), message="pods removed")


def test_stream_pod_logs_follows_until_the_pod_ends(backend: LocalBackend) -> None:
    script = "import time\nfor i in range(3): print('line', i); time.sleep(0.4)"
    run(backend, build("talk", ["python3", "-c", script]))
    wait_for(lambda: running_pids(backend, "talk"), message="running")
    received = []
    for line in backend.stream_pod_logs(namespace=NS, pod="talk-0-1", follow=True, poll_s=0.05):
        received.append((line, backend.get(ObjectRef(POD, "talk-0-1", NS))["status"]["phase"]))
    assert [line for line, _ in received] == ["line 0\n", "line 1\n", "line 2\n"]
    assert received[0][1] == "Running"  # streamed while it ran, not read afterwards
    assert backend.get(ObjectRef(POD, "talk-0-1", NS))["status"]["phase"] == "Succeeded"
    assert list(backend.stream_pod_logs(namespace=NS, pod="talk-0-1", follow=False)) == [
        "line 0\n",
        "line 1\n",
        "line 2\n",
    ]


def test_deleting_a_pod_recreates_its_index_without_counting_a_failure(backend: LocalBackend) -> None:
    run(backend, build("steady", SLEEP, retryLimit=0))
    pids = wait_for(lambda: running_pids(backend, "steady"))
    pod = backend.get(ObjectRef(POD, "steady-0-1", NS))
    with pytest.raises(ConflictError):
        backend.delete(ObjectRef(POD, "steady-0-1", NS), uid="someone-else")
    assert backend.delete(ObjectRef(POD, "steady-0-1", NS), grace_period_s=0, uid=pod["metadata"]["uid"]) is True
    wait_for(lambda: phases(backend, "steady") == {"steady-0-2": "Running"}, message="attempt 2")
    assert not live(pids)
    status = job(backend, "steady")["status"]
    assert "failed" not in status and status["active"] == 1 and not condition(backend, "steady", "Failed")


def test_namespace_deletion_and_close_leave_no_process(tmp_path: Path) -> None:
    be = LocalBackend(data_dir=tmp_path)
    try:
        for ns in (NS, "other"):
            be.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        run(be, build("a", SLEEP, nodes=2))
        other = build("b", SLEEP)
        other["metadata"]["namespace"] = "other"
        run(be, other)
        pids_a = wait_for(lambda: len(running_pids(be, "a")) == 2 and running_pids(be, "a"))

        def pid_b() -> int | None:
            found = [p["metadata"]["annotations"].get("gryvia.io/local-pid") for p in be.list(POD, namespace="other")]
            return int(found[0]) if found and found[0] else None

        pid = wait_for(pid_b, message="b running")
        be.delete(ObjectRef(NAMESPACE, "other"))
        wait_for(lambda: not group_alive(pid), message="the namespace's workload stopped")
        assert live(pids_a) == pids_a
    finally:
        be.close()
    assert not live(pids_a | {pid})
    assert not [t for t in threading.enumerate() if t.name.startswith("gryvia-")]


# -- KubernetesBackend: the same protocol change -------------------------------------------------------------------


@pytest.fixture
def kube():
    from apps.cluster.backends.kubernetes import KubernetesBackend
    from tests.kmock_cluster import running_kmock

    with running_kmock() as cluster:
        be = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
        yield be, cluster
        be.close()


def test_kubernetes_delete_sends_grace_and_uid_precondition(kube) -> None:
    be, cluster = kube
    cluster.seed({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-0", "namespace": NS, "uid": "abc"}})
    assert be.delete(ObjectRef(POD, "p-0", NS), grace_period_s=0, uid="abc") is True
    body = cluster.last_request("DELETE").body
    assert body["gracePeriodSeconds"] == 0 and body["preconditions"] == {"uid": "abc"}
    assert body["propagationPolicy"] == "Background"


def test_kubernetes_stream_pod_logs(kube) -> None:
    be, cluster = kube
    log = b"2024-05-01T10:00:00.5Z epoch 1\n2024-05-01T10:00:01.25Z epoch 2\n"
    cluster.react("get /api/v1/namespaces/team/pods/p-0/log", log)
    assert list(be.stream_pod_logs(namespace=NS, pod="p-0", follow=True)) == ["epoch 1\n", "epoch 2\n"]
    request = cluster.last_request("GET", "/api/v1/namespaces/team/pods/p-0/log")
    assert request.query["follow"] == "true" and request.query["timestamps"] == "true"
    cluster.react("get /api/v1/namespaces/team/pods/q-0/log", b"plain 1\nplain 2")
    assert list(be.stream_pod_logs(namespace=NS, pod="q-0", follow=False)) == ["plain 1\n", "plain 2\n"]
    assert "follow" not in cluster.last_request("GET", "/api/v1/namespaces/team/pods/q-0/log").query
