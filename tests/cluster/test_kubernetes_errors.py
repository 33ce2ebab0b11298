"""KubernetesBackend where a real API server differs from a happy path: status writes, writes into a missing
namespace, and failed calls (made once: the reconcilers retry, not the client). Against kmock on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from apps.cluster.backends.base import (
    CONFIG_MAP,
    JOB,
    NAMESPACE,
    NamespaceMissingError,
    NotFoundError,
    ObjectRef,
    UnavailableError,
)
from apps.cluster.backends.kubernetes import KubernetesBackend
from tests.kmock_cluster import KmockCluster, running_kmock


def cm(name: str, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


def test_a_status_write_changes_the_status_alone_with_a_new_resource_version(
    backend: KubernetesBackend, cluster: KmockCluster
) -> None:
    """As on a real API server, a controller's write to `/status` is a write: a new resourceVersion (what a
    reconciler compares to notice a change) and a watch event; the spec in its body is ignored."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "team-a"}, "spec": {"x": 1}}
    created = backend.apply(job)
    timer = threading.Timer(0.3, lambda: cluster.write_status(JOB, "j", "team-a", {"active": 2, "ready": 1}))
    timer.start()
    events = list(backend.watch(JOB, namespace="team-a", timeout_s=1.0))
    timer.join()
    got = backend.get(ObjectRef(JOB, "j", "team-a"))
    assert got["status"] == {"active": 2, "ready": 1} and got["spec"] == {"x": 1}
    assert int(got["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert [e.type for e in events] == ["ADDED", "MODIFIED"]
    assert events[1].object["metadata"]["resourceVersion"] == got["metadata"]["resourceVersion"]
    cluster.write_status(JOB, "j", "team-a", {"spec": "ignored", "succeeded": 2})
    again = backend.get(ObjectRef(JOB, "j", "team-a"))
    assert again["spec"] == {"x": 1} and again["status"]["succeeded"] == 2
    assert int(again["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])


def test_a_write_into_a_missing_namespace_names_it() -> None:
    """A real API server refuses a write into a namespace that does not exist with a 404 naming the namespace:
    the backend's NamespaceMissingError says which, so a reconciler can make it first. A plain 404 stays one."""
    with running_kmock(require_namespaces=True) as strict:
        be = KubernetesBackend.for_host(strict.url, qps=1000, burst=1000)
        with pytest.raises(NamespaceMissingError) as missing:
            be.apply(cm("x", "team-a"))
        assert missing.value.namespace == "team-a" and missing.value.status == 404
        assert 'namespaces "team-a" not found' in str(missing.value)
        with pytest.raises(NamespaceMissingError):
            be.create(cm("y", "team-a"))
        assert strict.stored(CONFIG_MAP, "x", "team-a") is None
        be.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
        assert be.apply(cm("x", "team-a"))["metadata"]["namespace"] == "team-a"
        with pytest.raises(NotFoundError) as plain:
            be.get(ObjectRef(CONFIG_MAP, "other", "team-a"))
        assert not isinstance(plain.value, NamespaceMissingError)
        with pytest.raises(NotFoundError) as gone:
            be.get(ObjectRef(NAMESPACE, "team-b"))
        assert not isinstance(gone.value, NamespaceMissingError)
        be.close()


@pytest.fixture
def hanging_up() -> Iterator[tuple[int, list[int]]]:
    """A port that accepts connections and closes them at once; yields (port, one entry per connection)."""
    accepted: list[int] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("source", ["kubeconfig", "in-cluster"])
def test_a_failed_call_is_made_once_whatever_the_config(source, hanging_up, tmp_path, monkeypatch, caplog) -> None:
    """One retry policy, the reconcilers' own: a client built from a kubeconfig or the in-cluster service account
    does not also retry each failed call 3 times in urllib3 (4 connections and three "Retrying" lines)."""
    from kubernetes.config import incluster_config, kube_config

    port, accepted = hanging_up
    if source == "kubeconfig":
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        )
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    else:
        (tmp_path / "token").write_text("sa-token")
        (tmp_path / "ca.crt").write_text("not a certificate")
        monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
        monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    be = KubernetesBackend(timeout_s=2.0)
    assert be.api_client.configuration.host.endswith(f"127.0.0.1:{port}")
    with caplog.at_level("DEBUG", logger="urllib3"), pytest.raises(UnavailableError):
        be.get(ObjectRef(CONFIG_MAP, "x", "a"))
    be.close()
    assert [r.getMessage() for r in caplog.records if "Retrying" in r.getMessage()] == []
    # In-cluster (https with a CA that does not load) the client gives up right after connecting, possibly before
    # the server's thread has taken the connection off the backlog: wait for it, then for any retry's.
    deadline = time.monotonic() + 2
    while not accepted and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    assert len(accepted) == 1
