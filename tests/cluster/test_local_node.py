"""One installation, one local node (issue 26, item 3): the process that runs the local backend's workloads, what
every other process of the installation reads, and what a dead node leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from apps.cluster.backends.base import JOB, POD, ObjectRef
from apps.cluster.backends.local import LocalBackend
from apps.cluster.backends.local.node import LocalNode, NodeBusyError, process_identity
from apps.cluster.backends.local.pods import group_alive

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-a"}}


def batch_job(name: str, script: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "tenant-a", "labels": {"app": name}},
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "python", "command": ["python3", "-c", script]}],
                },
            },
        },
    }


def wait(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def node(tmp_path):
    backend = LocalBackend(data_dir=tmp_path, node=True)
    yield backend
    backend.close()


def test_the_first_write_claims_the_node_and_another_process_is_refused_with_its_pid(node, tmp_path):
    node.apply(NAMESPACE)
    other = LocalBackend(data_dir=tmp_path, node=True)  # a second open of the lock: what another process gets
    try:
        with pytest.raises(NodeBusyError, match=rf"pid {os.getpid()} runs them: start one `make worker`"):
            other.apply(NAMESPACE)
    finally:
        other.close()


def test_other_processes_read_the_nodes_pods_and_their_logs(node, tmp_path):
    node.apply(NAMESPACE)
    node.apply(batch_job("hello", "print('hello from the node')"))
    reader = LocalBackend(data_dir=tmp_path, node=True)
    try:
        pods = wait(
            lambda: [p for p in reader.list(POD, namespace="tenant-a") if p["status"].get("phase") == "Succeeded"]
        )
        assert [p["metadata"]["name"] for p in pods] == [p["metadata"]["name"] for p in node.list(POD)]
        assert reader.pod_logs(namespace="tenant-a", pod=pods[0]["metadata"]["name"]) == "hello from the node\n"
        assert reader.list(JOB, label_selector="app=hello")[0]["status"]["succeeded"] == 1
        node.close()  # the node stops: nothing it ran is shown any more, and the reader may take over
        assert reader.list(POD) == []
        reader.apply(NAMESPACE)
        assert reader.get(ObjectRef.of(NAMESPACE))["metadata"]["name"] == "tenant-a"
    finally:
        reader.close()


def test_a_new_node_kills_the_process_groups_a_dead_node_left(tmp_path):
    # A pod's child in the pod's process group, whose main process died with its node (PR_SET_PDEATHSIG).
    leftover = subprocess.Popen(["sleep", "60"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        groups = tmp_path / "local-node" / "groups"
        groups.mkdir(parents=True)
        (groups / str(leftover.pid)).write_text(process_identity(leftover.pid))
        (groups / str(stranger.pid)).write_text(f"{stranger.pid}:1")  # that pid now names another process
        backend = LocalBackend(data_dir=tmp_path, node=True)
        backend.apply(NAMESPACE)
        assert leftover.wait(5) == -signal.SIGKILL
        assert stranger.poll() is None and group_alive(stranger.pid)
        assert not list(groups.iterdir())
        backend.close()
    finally:
        for proc in (leftover, stranger):
            proc.kill()
            proc.wait()


def test_a_pod_dies_with_the_process_that_runs_it_even_by_sigkill(tmp_path):
    """The node process is SIGKILLed: its pods get SIGKILL from the kernel (nothing could stop them otherwise)."""
    script = f"""
import time
from pathlib import Path
from apps.cluster.backends.local import LocalBackend
backend = LocalBackend(data_dir=Path({str(tmp_path)!r}), node=True)
backend.apply({NAMESPACE!r})
backend.apply({batch_job("sleeper", "import os, time; print(os.getpid(), flush=True); time.sleep(60)")!r})
time.sleep(60)
"""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gryvia_site.settings.test"}
    node = subprocess.Popen([sys.executable, "-c", "import django; django.setup()\n" + script], env=env)
    try:
        log = wait(
            lambda: next((p for p in (tmp_path / "logs" / "tenant-a").glob("sleeper-*.log") if p.read_text()), None), 60
        )
        pid = int(log.read_text().split()[0])
        assert group_alive(pid)
        node.kill()
        node.wait(10)
        assert wait(lambda: not group_alive(pid), 10)
        assert LocalNode(tmp_path).published() is None  # its published objects name a process that is gone
    finally:
        node.kill()
        node.wait()
