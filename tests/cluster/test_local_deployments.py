"""The local backend runs an `apps/v1 Deployment` as local processes: one port per replica on 127.0.0.1, readiness
from the httpGet probe, Deployment status with the ready replicas' addresses, scale, Recreate on a new template,
and nothing left running after a delete."""

from __future__ import annotations

import copy
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apps.cluster.backends.base import DEPLOYMENT, NAMESPACE, POD, ObjectRef
from apps.cluster.backends.local import LocalBackend
from apps.cluster.backends.local.pods import group_alive
from tests.cluster.test_local_workloads import wait_for

NS = "team"
SERVER = ["/bin/sh", "-c", 'mkdir -p ok && exec python3 -m http.server "$(PORT)" --bind 127.0.0.1']
REF = ObjectRef(DEPLOYMENT, "web", NS)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    be = LocalBackend(data_dir=tmp_path / "data")
    be.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield be
    be.close()


def deployment(*, replicas: int = 1, path: str = "/ok/", command: list[str] = SERVER, tag: str = "1") -> dict:
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {"tag": tag}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": "server",
                            "image": "python:3.11-slim",
                            "command": command,
                            "env": [{"name": "PORT", "value": "8000"}],
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "readinessProbe": {"httpGet": {"path": path, "port": "http"}, "periodSeconds": 5},
                        }
                    ],
                },
            },
        },
    }


def status(backend: LocalBackend) -> dict[str, Any]:
    return backend.get(REF).get("status") or {}


def pods(backend: LocalBackend) -> list[dict[str, Any]]:
    return backend.list(POD, label_selector="app=web", namespace=NS)


def pids(backend: LocalBackend) -> set[int]:
    return {
        int(p["metadata"]["annotations"]["gryvia.io/local-pid"])
        for p in pods(backend)
        if "gryvia.io/local-pid" in p["metadata"]["annotations"]
    }


def test_replicas_get_their_own_ports_and_become_ready_by_their_http_probe(backend: LocalBackend) -> None:
    backend.apply(deployment(replicas=2))
    wait_for(lambda: status(backend).get("readyReplicas") == 2, message="2 replicas ready")
    seen = status(backend)
    endpoints = seen["endpoints"]
    running = pods(backend)
    ports = sorted(p["metadata"]["annotations"]["gryvia.io/local-port"] for p in running)
    assert sorted(e.rsplit(":", 1)[1] for e in endpoints) == ports and len(set(ports)) == 2 and "8000" not in ports
    for pod in running:  # named as a ReplicaSet names its pods, labelled with the template's hash
        template_hash = pod["metadata"]["labels"]["pod-template-hash"]
        assert re.fullmatch(rf"web-{template_hash}-[a-z0-9]{{5}}", pod["metadata"]["name"])
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
        assert pod["status"]["containerStatuses"][0]["ready"] is True
    available = next(c for c in seen["conditions"] if c["type"] == "Available")
    assert available["status"] == "True" and available["reason"] == "MinimumReplicasAvailable"
    assert seen["replicas"] == 2 and seen["availableReplicas"] == 2 and "unavailableReplicas" not in seen
    for url in endpoints:
        with urllib.request.urlopen(url + "/ok/", timeout=5) as response:
            assert response.status == 200


def test_a_failing_http_probe_keeps_the_replica_unready(backend: LocalBackend) -> None:
    backend.apply(deployment(path="/missing"))  # http.server answers 404 there
    wait_for(lambda: pids(backend), message="the process runs")
    pod = wait_for(
        lambda: next((p for p in pods(backend) if p["metadata"]["annotations"].get("gryvia.io/local-port")), None)
    )
    port = pod["metadata"]["annotations"]["gryvia.io/local-port"]
    wait_for(lambda: _answers(port), message="the server listens")
    time.sleep(1.0)  # several probe periods (0.25 s while unready) against the live server
    wait_for(lambda: backend.get(REF).get("status"), message="a status")
    seen = status(backend)
    assert "readyReplicas" not in seen and "endpoints" not in seen and seen["unavailableReplicas"] == 1
    available = next(c for c in seen["conditions"] if c["type"] == "Available")
    assert available["status"] == "False" and available["reason"] == "MinimumReplicasUnavailable"


def _answers(port: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1):
            return True
    except OSError:
        return False


def test_scale_down_and_a_new_template_replace_the_pods(backend: LocalBackend) -> None:
    backend.apply(deployment(replicas=2))
    wait_for(lambda: status(backend).get("readyReplicas") == 2, message="2 ready")
    first = pids(backend)
    backend.apply(deployment(replicas=1))
    wait_for(lambda: len(pods(backend)) == 1 and status(backend).get("readyReplicas") == 1, message="scaled to 1")
    assert len(first - pids(backend)) == 1 and not any(group_alive(p) for p in first - pids(backend))
    old_pod = pods(backend)[0]
    backend.apply(deployment(replicas=1, tag="2"))  # a new pod template: Recreate

    def replaced() -> bool:
        now = pods(backend)
        return (
            len(now) == 1
            and now[0]["metadata"]["name"] != old_pod["metadata"]["name"]
            and status(backend).get("readyReplicas") == 1
        )

    wait_for(replaced, message="the new template's pod ready")
    new_pod = pods(backend)[0]
    assert new_pod["metadata"]["labels"]["pod-template-hash"] != old_pod["metadata"]["labels"]["pod-template-hash"]
    assert new_pod["metadata"]["annotations"]["tag"] == "2"
    assert not group_alive(int(old_pod["metadata"]["annotations"]["gryvia.io/local-pid"]))


def test_a_crashing_server_restarts_in_place_and_delete_leaves_nothing(backend: LocalBackend) -> None:
    crash = ["python3", "-c", "import sys; print('boom'); sys.exit(3)"]
    backend.apply(deployment(command=crash))

    def restarted() -> dict | None:
        found = pods(backend)
        container = ((found[0].get("status") or {}).get("containerStatuses") or [{}])[0] if found else {}
        return found[0] if container.get("restartCount", 0) >= 1 else None

    pod = wait_for(restarted, timeout=10, message="a restart")
    container = pod["status"]["containerStatuses"][0]
    assert container["lastState"]["terminated"]["exitCode"] == 3 and pod["status"]["phase"] == "Running"
    backend.apply(copy.deepcopy(deployment(tag="serve")))
    wait_for(lambda: status(backend).get("readyReplicas") == 1, message="the fixed server ready")
    running = pids(backend)
    assert backend.delete(REF) is True
    wait_for(lambda: not pods(backend) and not any(group_alive(p) for p in running), message="all gone")
    backend.delete(ObjectRef(NAMESPACE, NS))
