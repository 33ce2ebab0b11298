"""KubernetesBackend against kmock on loopback (see tests/kmock_cluster.py). No database, no Django."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import kmock
import pytest

from apps.cluster.backends.base import (
    CONFIG_MAP,
    LIMIT_RANGE,
    NAMESPACE,
    NETWORK_POLICY,
    NODE,
    POD,
    PRIORITY_CLASS,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    ClusterBackend,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    ObjectRef,
    UnavailableError,
)
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.cluster.ratelimit import TokenBucket
from tests.kmock_cluster import KmockCluster, running_kmock


def cm(name: str, namespace: str = "team-a", **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": {"gryvia.io/x": "1"}},
        "data": {"k": "v"},
    }


def status_body(code: int, message: str) -> dict:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "message": message}


def test_backend_satisfies_protocol(backend: KubernetesBackend) -> None:
    assert isinstance(backend, ClusterBackend)
    assert backend.name == "kubernetes"


def test_create_then_get_keeps_metadata(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    created = backend.create(cm("cfg", app="train"))
    assert created["metadata"]["labels"] == {"app": "train"}
    got = backend.get(ObjectRef(CONFIG_MAP, "cfg", "team-a"))
    assert got["apiVersion"] == "v1" and got["kind"] == "ConfigMap"
    assert got["metadata"]["annotations"] == {"gryvia.io/x": "1"}
    assert got["metadata"]["uid"] and got["metadata"]["resourceVersion"]
    assert got["data"] == {"k": "v"}
    post = cluster.last_request("POST")
    assert post.path == "/api/v1/namespaces/team-a/configmaps"
    assert post.content_type == "application/json"
    assert post.body["metadata"]["name"] == "cfg"


def test_list_by_label_in_one_and_all_namespaces(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    backend.create(cm("one", "team-a", app="train"))
    backend.create(cm("two", "team-b", app="train"))
    backend.create(cm("three", "team-b", app="serve"))

    in_a = backend.list(CONFIG_MAP, label_selector="app=train", namespace="team-a")
    assert [o["metadata"]["name"] for o in in_a] == ["one"]
    everywhere = backend.list(CONFIG_MAP, label_selector="app=train")
    assert sorted(o["metadata"]["name"] for o in everywhere) == ["one", "two"]
    assert all(o["apiVersion"] == "v1" and o["kind"] == "ConfigMap" for o in everywhere)
    req = cluster.last_request("GET")
    assert req.path == "/api/v1/configmaps" and req.query == {"labelSelector": "app=train"}
    assert len(backend.list(CONFIG_MAP)) == 3


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        (RESOURCE_QUOTA, "/api/v1/resourcequotas"),
        (LIMIT_RANGE, "/api/v1/limitranges"),
        (NETWORK_POLICY, "/apis/networking.k8s.io/v1/networkpolicies"),
        (ROLE_BINDING, "/apis/rbac.authorization.k8s.io/v1/rolebindings"),
    ],
)
def test_list_kinds_across_namespaces(backend: KubernetesBackend, cluster: KmockCluster, kind, path) -> None:
    assert backend.list(kind, label_selector="app.kubernetes.io/managed-by=gryvia") == []
    for ns, manager in (("t1", "gryvia"), ("t2", "gryvia"), ("t3", "helm")):
        manifest = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": "x", "namespace": ns, "labels": {"app.kubernetes.io/managed-by": manager}},
        }
        backend.apply(manifest)
    found = backend.list(kind, label_selector="app.kubernetes.io/managed-by=gryvia")
    assert sorted(o["metadata"]["namespace"] for o in found) == ["t1", "t2"]
    assert all(o["kind"] == kind.kind and o["apiVersion"] == kind.api_version for o in found)
    assert cluster.last_request("GET").path == path


def test_apply_creates_then_updates(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    first = backend.apply(cm("applied", tier="gold", old="yes"))
    assert first["metadata"]["labels"] == {"tier": "gold", "old": "yes"}
    req = cluster.last_request("PATCH")
    assert req.path == "/api/v1/namespaces/team-a/configmaps/applied"
    assert req.content_type == "application/apply-patch+yaml"
    assert req.query == {"fieldManager": "gryvia", "force": "true"}
    assert req.body["metadata"]["labels"] == {"tier": "gold", "old": "yes"}

    second = backend.apply(cm("applied", tier="silver"))
    assert second["metadata"]["labels"] == {"tier": "silver"}  # apply drops fields we no longer set
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    stored = cluster.stored(CONFIG_MAP, "applied", "team-a")
    assert stored is not None and stored["metadata"]["labels"] == {"tier": "silver"}
    assert [r.method for r in cluster.requests()] == ["PATCH", "PATCH"]


def test_apply_of_namespaced_kind_without_namespace_is_invalid(backend: KubernetesBackend, cluster) -> None:
    manifest = cm("x")
    del manifest["metadata"]["namespace"]
    with pytest.raises(InvalidError):
        backend.apply(manifest)
    assert cluster.requests() == []


def test_apply_to_a_node_owns_only_the_fields_it_sets(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    """A partial Node manifest (a reservation claim): the cluster-scoped path, labels merged with what others
    wrote, the atomic taint list set whole, and a resourceVersion precondition."""
    vendor = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    claim = {"key": "gryvia.io/reserved", "value": "alpha", "effect": "NoSchedule"}
    cluster.seed(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {"taints": [vendor]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
    )
    seeded = cluster.stored(NODE, "gpu-1")["metadata"].get("resourceVersion") or "1"  # stale after the applies
    labelled = {"name": "gpu-1", "labels": {"gryvia.io/reserved": "alpha"}}
    applied = backend.apply(
        {"apiVersion": "v1", "kind": "Node", "metadata": labelled, "spec": {"taints": [vendor, claim]}}
    )
    assert cluster.last_request("PATCH").path == "/api/v1/nodes/gpu-1"
    assert applied["metadata"]["labels"] == {"nvidia.com/gpu.product": "H100", "gryvia.io/reserved": "alpha"}
    assert applied["spec"]["taints"] == [vendor, claim] and applied["status"] == {
        "allocatable": {"nvidia.com/gpu": "8"}
    }
    released = backend.apply(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}, "spec": {"taints": [vendor]}}
    )
    assert released["metadata"]["labels"] == {"nvidia.com/gpu.product": "H100"}  # our label went, theirs stayed
    assert released["spec"]["taints"] == [vendor]
    for stale in ({"name": "gpu-1", "resourceVersion": seeded}, {"name": "gone", "resourceVersion": seeded}):
        with pytest.raises(ConflictError):
            backend.apply({"apiVersion": "v1", "kind": "Node", "metadata": stale})
    assert cluster.stored(NODE, "gone") is None  # a precondition never creates


def test_delete_true_then_false(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    backend.create(cm("gone"))
    ref = ObjectRef(CONFIG_MAP, "gone", "team-a")
    assert backend.delete(ref) is True
    assert cluster.last_request("DELETE").body["propagationPolicy"] == "Background"
    assert backend.delete(ref) is False
    with pytest.raises(NotFoundError):
        backend.get(ref)


def test_watch_sees_existing_and_live_objects_then_stops(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    backend.create(cm("before", app="w"))
    backend.create(cm("other", app="not-w"))
    timer = threading.Timer(0.3, lambda: backend.create(cm("during", app="w")))
    timer.start()
    started = time.monotonic()
    events = list(backend.watch(CONFIG_MAP, namespace="team-a", label_selector="app=w", timeout_s=1.0))
    elapsed = time.monotonic() - started
    timer.join()
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "before"), ("ADDED", "during")]
    assert events[0].object["kind"] == "ConfigMap"
    assert 0.9 <= elapsed < 3.0
    req = next(r for r in cluster.requests("GET") if r.query.get("watch") == "true")
    assert req.query == {"watch": "true", "labelSelector": "app=w", "timeoutSeconds": "1"}


def test_watch_stops_on_client_timeout_when_server_ignores_timeout_seconds() -> None:
    with running_kmock(honor_watch_timeout=False) as deaf:
        be = KubernetesBackend.for_host(deaf.url, qps=1000, burst=1000)
        be.create(cm("x"))
        started = time.monotonic()
        events = list(be.watch(CONFIG_MAP, timeout_s=0.5))
        assert [e.type for e in events] == ["ADDED"]
        assert time.monotonic() - started < 2.0
        be.close()


def test_not_found_maps_with_server_message(backend: KubernetesBackend) -> None:
    with pytest.raises(NotFoundError) as err:
        backend.get(ObjectRef(CONFIG_MAP, "missing", "team-a"))
    assert err.value.status == 404
    assert "GET /api/v1/namespaces/team-a/configmaps/missing" in str(err.value)
    assert "not found" in str(err.value).lower()


def test_duplicate_create_conflicts(backend: KubernetesBackend) -> None:
    backend.create(cm("dup"))
    with pytest.raises(ConflictError) as err:
        backend.create(cm("dup"))
    assert err.value.status == 409 and "POST /api/v1/namespaces/team-a/configmaps" in str(err.value)


def test_forbidden_invalid_and_server_errors(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    cluster.react("get /api/v1/namespaces/locked/configmaps/x", 403, status_body(403, "denied by policy"))
    cluster.react("post /api/v1/namespaces/bad/configmaps", 422, status_body(422, "data.k: Invalid value"))
    cluster.react("get /api/v1/namespaces/flaky/configmaps", 503, status_body(503, "etcd is down"))
    cluster.react("get /api/v1/namespaces/auth/configmaps/x", 401, status_body(401, "Unauthorized"))
    with pytest.raises(ForbiddenError, match="denied by policy") as forbidden:
        backend.get(ObjectRef(CONFIG_MAP, "x", "locked"))
    assert forbidden.value.status == 403 and "GET /api/v1/namespaces/locked/configmaps/x" in str(forbidden.value)
    with pytest.raises(InvalidError, match="data.k: Invalid value"):
        backend.create(cm("x", "bad"))
    with pytest.raises(UnavailableError, match="etcd is down") as unavailable:
        backend.list(CONFIG_MAP, namespace="flaky")
    assert unavailable.value.status == 503
    with pytest.raises(ForbiddenError) as unauthorized:
        backend.get(ObjectRef(CONFIG_MAP, "x", "auth"))
    assert unauthorized.value.status == 401


def test_closed_port_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    be = KubernetesBackend.for_host(f"http://127.0.0.1:{port}", timeout_s=1.0)
    with pytest.raises(UnavailableError, match=r"GET /api/v1/namespaces/a/configmaps/x"):
        be.get(ObjectRef(CONFIG_MAP, "x", "a"))
    with pytest.raises(UnavailableError):
        list(be.watch(CONFIG_MAP, timeout_s=0.5))


def test_slow_server_times_out_as_unavailable(cluster: KmockCluster) -> None:
    async def slow() -> dict:
        await asyncio.sleep(1.0)
        return {}

    cluster.react("get /api/v1/namespaces/slow/configmaps/x", slow)
    be = KubernetesBackend.for_host(cluster.url, timeout_s=0.2)
    with pytest.raises(UnavailableError, match="Timeout"):
        be.get(ObjectRef(CONFIG_MAP, "x", "slow"))
    be.close()


def test_namespaces_and_priority_classes(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    labels = {"app.kubernetes.io/managed-by": "gryvia", "gryvia.io/tenant": "acme"}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "acme", "labels": labels}}
    created = backend.create(ns)
    assert created["metadata"]["labels"] == labels
    backend.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "beta", "labels": labels}})
    backend.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other", "labels": {"x": "y"}}})
    with pytest.raises(ConflictError):
        backend.create(ns)
    patch = cluster.last_request("PATCH")
    assert patch.path == "/api/v1/namespaces/other" and patch.content_type == "application/apply-patch+yaml"

    managed = backend.list(NAMESPACE, label_selector="app.kubernetes.io/managed-by=gryvia")
    assert [o["metadata"]["name"] for o in managed] == ["acme", "beta"]
    assert all(o["kind"] == "Namespace" for o in managed)
    relabelled = backend.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "beta", "labels": {"gryvia.io/tenant": "b"}}}
    )
    assert relabelled["metadata"]["labels"] == {"gryvia.io/tenant": "b"}
    assert backend.get(ObjectRef(NAMESPACE, "acme"))["metadata"]["labels"] == labels

    backend.create(cm("inside", "acme"))
    assert backend.delete(ObjectRef(NAMESPACE, "acme")) is True
    assert backend.delete(ObjectRef(NAMESPACE, "acme")) is False
    assert backend.list(CONFIG_MAP, namespace="acme") == []  # the namespace took its objects with it
    assert [o["metadata"]["name"] for o in backend.list(NAMESPACE)] == ["beta", "other"]

    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gpu-high"}, "value": 9}
    assert backend.apply(pc)["value"] == 9
    assert backend.apply({**pc, "value": 10})["value"] == 10
    assert [o["value"] for o in backend.list(PRIORITY_CLASS)] == [10]
    assert backend.delete(ObjectRef(PRIORITY_CLASS, "gpu-high")) is True


def test_namespace_watch(backend: KubernetesBackend) -> None:
    backend.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "w", "labels": {"a": "b"}}})
    events = list(backend.watch(NAMESPACE, label_selector="a=b", timeout_s=0.5))
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "w")]


def test_pod_logs_and_events(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    cluster.react("get /api/v1/namespaces/team-a/pods/trainer-0/log", b"epoch 1\nepoch 2\n")
    assert backend.pod_logs(namespace="team-a", pod="trainer-0", container="main", tail_lines=2) == "epoch 1\nepoch 2\n"
    assert cluster.last_request("GET").query == {"container": "main", "tailLines": "2"}
    with pytest.raises(NotFoundError):
        backend.pod_logs(namespace="team-a", pod="nope")

    for name, involved in (("e1", "trainer-0"), ("e2", "trainer-1"), ("e3", "trainer-0")):
        cluster.seed(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": "team-a"},
                "involvedObject": {"kind": "Pod", "name": involved, "namespace": "team-a"},
                "reason": "Scheduled",
            }
        )
    events = backend.events(namespace="team-a", involved_name="trainer-0")
    assert sorted(e["metadata"]["name"] for e in events) == ["e1", "e3"]
    assert events[0]["kind"] == "Event"
    assert cluster.last_request("GET").query == {"fieldSelector": "involvedObject.name=trainer-0"}
    assert len(backend.events(namespace="team-a")) == 3
    assert backend.list(POD) == []


def test_user_reaction_overrides_emulator(backend: KubernetesBackend, cluster: KmockCluster) -> None:
    cluster.react(("get", kmock.resource("v1", "pods")), {"items": [{"metadata": {"name": "fake"}}]})
    assert backend.list(POD, namespace="anything") == [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fake"}}
    ]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_token_bucket_burst_then_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(5)]
    assert waits == [0.0, 0.0, 0.0, pytest.approx(0.1), pytest.approx(0.1)]
    assert clock.sleeps == [pytest.approx(0.1), pytest.approx(0.1)]
    clock.now += 10  # idle: refills, but never beyond the burst
    assert bucket.available == pytest.approx(3.0)
    assert [bucket.acquire() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.1)]


def test_token_bucket_reservations_queue_up_across_threads() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=1, clock=clock, sleep=lambda s: None)
    waits = sorted(bucket.reserve() for _ in range(4))  # nobody sleeps, so the clock stands still
    assert waits == [0.0, pytest.approx(0.5), pytest.approx(1.0), pytest.approx(1.5)]
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)
    with pytest.raises(ValueError):
        TokenBucket(qps=1, burst=0)


def test_backend_takes_a_token_per_call(backend: KubernetesBackend) -> None:
    clock = FakeClock()
    backend.bucket = TokenBucket(qps=5, burst=1, clock=clock, sleep=clock.sleep)
    backend.create(cm("a"))
    backend.get(ObjectRef(CONFIG_MAP, "a", "team-a"))
    backend.list(CONFIG_MAP)
    assert clock.sleeps == [pytest.approx(0.2), pytest.approx(0.2)]
