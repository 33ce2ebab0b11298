"""GPU reservations become node claims: the pure choice, the Node manifests, and passes against kmock and the local
backend (label, taint and annotation applied and removed by server-side apply; other taints and labels kept)."""

from __future__ import annotations

import copy
import datetime as dt

import kubernetes_validate
import pytest
from django.utils import timezone

from apps.cluster.backends.base import NODE, ConflictError
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.cluster.backends.local import LocalBackend
from apps.cluster.gpus import GpuInventory
from apps.queueing import selectors, services
from apps.queueing.inventory import node_views
from apps.queueing.models import GpuNode, Reservation
from apps.queueing.placement import RESERVED_KEY, place, reservation_claims
from apps.queueing.reservations import (
    RESERVATION_ANNOTATION,
    ClaimNode,
    Demand,
    claim_manifest,
    claim_node,
    desired_claims,
    reconcile_reservations,
)
from tests.factories import ACTOR
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db
NOW = timezone.now()
UNHEALTHY = {"key": "gryvia.io/gpu-unhealthy", "effect": "NoSchedule"}
VENDOR = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def gpu_node(name, *, product="NVIDIA-H100-80GB-HBM3", gpus=8, ready=True, taints=(), cordoned=False, **labels):
    """A v1 Node as GPU feature discovery labels it."""
    spec: dict = {"taints": list(taints)}
    if cordoned:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "kubernetes.io/hostname": name,
                **labels,
            },
        },
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def reserve(tenant, *, gpu_type="H100", count=8, start=None, hours=4):
    start = start or NOW - dt.timedelta(minutes=1)
    return services.reservation_create(
        actor=ACTOR,
        tenant=tenant,
        gpu_type=gpu_type,
        count=count,
        start_at=start,
        end_at=start + dt.timedelta(hours=hours),
    )


def claimed_by(node: dict) -> tuple[str | None, str | None, list]:
    """(reserved label, reservation annotation, reserved taints) of a stored node."""
    meta = node["metadata"]
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] == RESERVED_KEY]
    return (
        (meta.get("labels") or {}).get(RESERVED_KEY),
        (meta.get("annotations") or {}).get(RESERVATION_ANNOTATION),
        taints,
    )


# --- the choice (pure) -----------------------------------------------------------------------------------------


def view(name, gpus=8, **kw) -> ClaimNode:
    return ClaimNode(name=name, gpu_type=kw.pop("gpu_type", "H100"), gpus=gpus, **kw)


def test_whole_nodes_of_the_type_fewest_allocated_first():
    demand = Demand(id=1, tenant="alpha", gpu_type="h100", count=12)  # types compare case-insensitively
    nodes = [
        view("busy", allocated=6),
        view("idle-b"),
        view("idle-a", allocated=0),
        view("a100", gpu_type="A100"),
        view("sick", usable=False),
        view("no-gpus", gpus=0),
    ]
    plan = desired_claims([demand], nodes)
    assert plan.nodes[1] == ["idle-a", "idle-b"] and plan.gpus[1] == 16
    assert plan.messages[1] == "holds 16 h100 GPUs on 2 node(s) (whole nodes, 12 reserved)"


def test_claims_are_stable_and_never_taken_from_another_reservation_or_owner():
    first = Demand(id=1, tenant="alpha", gpu_type="H100", count=8)
    second = Demand(id=2, tenant="bravo", gpu_type="H100", count=8)
    nodes = [
        view("n1"),  # free and emptiest: still not moved to, the reservation keeps its node
        view("n2", allocated=4, holder="bravo", reservation="2"),
        view("n3", allocated=2, holder="alpha", reservation="1"),
        view("n4", holder="charlie"),  # claimed outside Gryvia
    ]
    plan = desired_claims([first, second], nodes)
    assert plan.nodes == {1: ["n3"], 2: ["n2"]}
    # A reservation of the tenant that held a node before (an ended one) takes it over first.
    nodes = [view("n1"), view("n2", allocated=3, holder="alpha", reservation="9")]
    assert desired_claims([first], nodes).nodes[1] == ["n2"]
    # A node that is no longer usable is given up and replaced.
    nodes = [view("n1"), view("n3", holder="alpha", reservation="1", usable=False)]
    assert desired_claims([first], nodes).nodes[1] == ["n1"]


def test_an_uncoverable_reservation_claims_what_it_can_and_says_what_is_short():
    first = Demand(id=1, tenant="alpha", gpu_type="H100", count=8)
    greedy = Demand(id=2, tenant="bravo", gpu_type="H100", count=24)
    nodes = [view("n1"), view("n2"), view("n3", usable=False), view("n4", holder="ops"), view("x", gpu_type="A100")]
    plan = desired_claims([first, greedy], nodes)
    assert plan.nodes == {1: ["n1"], 2: ["n2"]} and plan.gpus[2] == 8
    assert plan.messages[2] == (
        "holds 8 of 24 H100 GPUs: not enough Ready, healthy, schedulable H100 nodes free of other claims "
        "(4 H100 node(s): 1 held here, 1 held by other reservations, 1 claimed outside Gryvia, 1 not usable)"
    )


def test_claim_node_reads_health_type_and_who_claimed_it():
    node = gpu_node("g", taints=[UNHEALTHY])
    assert claim_node(node, allocated=3) == ClaimNode(name="g", gpu_type="H100", gpus=8, allocated=3, usable=False)
    assert not claim_node(gpu_node("c", cordoned=True)).usable and not claim_node(gpu_node("r", ready=False)).usable
    human = gpu_node("h", **{RESERVED_KEY: "ops"})
    assert claim_node(human).foreign
    tainted_only = gpu_node("t", taints=[{"key": RESERVED_KEY, "value": "ops", "effect": "NoSchedule"}])
    assert claim_node(tainted_only).foreign and claim_node(tainted_only).holder == "ops"


def test_claim_and_release_manifests_keep_other_taints_and_carry_the_resource_version():
    node = gpu_node("g", taints=[VENDOR])
    node["metadata"]["resourceVersion"] = "41"
    demand = Demand(id=7, tenant="alpha", gpu_type="H100", count=8)
    claim = claim_manifest(node, demand)
    taint = {"key": RESERVED_KEY, "value": "alpha", "effect": "NoSchedule"}
    assert claim == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "g",
            "resourceVersion": "41",
            "labels": {RESERVED_KEY: "alpha"},
            "annotations": {RESERVATION_ANNOTATION: "7"},
        },
        "spec": {"taints": [VENDOR, taint]},
    }
    kubernetes_validate.validate(claim, "1.33", strict=True)
    claimed = copy.deepcopy(node)
    claimed["metadata"]["labels"].update(claim["metadata"]["labels"])
    claimed["metadata"]["annotations"] = claim["metadata"]["annotations"]
    claimed["spec"] = claim["spec"]
    assert claim_manifest(claimed, demand) is None  # already so: nothing to apply
    assert claim_manifest(node, None) is None  # nobody's and unclaimed: nothing to apply
    other = Demand(id=8, tenant="bravo", gpu_type="H100", count=8)
    assert claim_manifest(claimed, other)["spec"]["taints"] == [VENDOR, {**taint, "value": "bravo"}]
    assert claim_manifest(claimed, None) == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "g", "resourceVersion": "41"},
        "spec": {"taints": [VENDOR]},
    }


# --- passes against kmock --------------------------------------------------------------------------------------


@pytest.fixture
def cluster():
    with running_kmock() as running:
        yield running


@pytest.fixture
def kube(cluster):
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    yield backend
    backend.close()


def _node_patches(cluster) -> dict[str, dict]:
    return {r.path.rsplit("/", 1)[1]: r for r in cluster.requests("PATCH") if r.path.startswith("/api/v1/nodes/")}


def test_an_active_reservation_claims_nodes_and_an_ended_one_releases_them(cluster, kube, tenant_a):
    cluster.seed(gpu_node("h100-a", taints=[VENDOR]))
    cluster.seed(gpu_node("h100-b"))
    cluster.seed(gpu_node("h100-c"))
    cluster.seed(gpu_node("a100-a", product="NVIDIA-A100-SXM4-80GB"))
    GpuNode.objects.create(name="h100-a", allocated_gpus=5)  # busiest: claimed last
    reservation = reserve(tenant_a, count=16)

    stats = reconcile_reservations(kube)
    assert (stats.applied, stats.deleted, stats.errors, stats.lists) == (2, 0, 0, 1)
    patches = _node_patches(cluster)
    assert set(patches) == {"h100-b", "h100-c"}
    request = patches["h100-b"]
    assert request.content_type == "application/apply-patch+yaml"
    assert request.query == {"fieldManager": "gryvia", "force": "true"}
    assert request.body["metadata"]["labels"] == {RESERVED_KEY: "alpha"}
    assert request.body["metadata"]["annotations"] == {RESERVATION_ANNOTATION: str(reservation.pk)}
    assert request.body["spec"]["taints"] == [{"key": RESERVED_KEY, "value": "alpha", "effect": "NoSchedule"}]
    stored = cluster.stored(NODE, "h100-b")
    assert stored["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"  # others' labels stay
    assert stored["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    assert claimed_by(cluster.stored(NODE, "h100-a")) == (None, None, [])
    reservation.refresh_from_db()
    assert reservation.status_claimed_nodes == ["h100-b", "h100-c"] and reservation.status_claimed_gpus == 16
    assert reservation.status_message == "holds 16 H100 GPUs on 2 node(s)" and reservation.status_updated_at

    cluster.clear_requests()
    again = reconcile_reservations(kube)  # nothing changed: one LIST, no write
    assert (again.applied, again.deleted, again.reconciled) == (0, 0, 0)
    assert [r.method for r in cluster.requests()] == ["GET"]

    # The reservation shrinks: one node is given back, the other kept.
    services.reservation_update(actor=ACTOR, reservation=reservation, count=8)
    assert reconcile_reservations(kube).deleted == 1
    assert claimed_by(cluster.stored(NODE, "h100-b"))[0] == "alpha"
    assert claimed_by(cluster.stored(NODE, "h100-c")) == (None, None, [])

    # It ends: the claim goes (an apply without it), the vendor's labels stay.
    version = cluster.stored(NODE, "h100-b")["metadata"]["resourceVersion"]
    cluster.clear_requests()
    stats = reconcile_reservations(kube, now=reservation.end_at)
    assert (stats.applied, stats.deleted) == (0, 1)
    assert _node_patches(cluster)["h100-b"].body == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "h100-b", "resourceVersion": version},
        "spec": {"taints": []},
    }
    stored = cluster.stored(NODE, "h100-b")
    assert claimed_by(stored) == (None, None, [])
    assert stored["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    reservation.refresh_from_db()
    assert reservation.status_claimed_nodes == [] and reservation.status_claimed_gpus == 0
    assert reservation.status_message == "ended: its nodes are released"


def test_other_taints_survive_a_claim_and_its_release(cluster, kube, tenant_a):
    cluster.seed(gpu_node("only", taints=[VENDOR]))
    reservation = reserve(tenant_a)
    reconcile_reservations(kube)
    taints = cluster.stored(NODE, "only")["spec"]["taints"]
    assert VENDOR in taints and len(taints) == 2
    services.reservation_delete(actor=ACTOR, reservation=reservation)
    assert reconcile_reservations(kube).deleted == 1  # a deleted reservation's claims go too
    assert cluster.stored(NODE, "only")["spec"]["taints"] == [VENDOR]
    assert claimed_by(cluster.stored(NODE, "only")) == (None, None, [])


def test_an_uncoverable_reservation_records_why(cluster, kube, tenant_a, tenant_b):
    cluster.seed(gpu_node("h100-a"))
    cluster.seed(gpu_node("h100-sick", taints=[UNHEALTHY]))
    cluster.seed(gpu_node("h100-ops", **{RESERVED_KEY: "ops"}))  # somebody else's claim
    first = reserve(tenant_b, count=8, start=NOW - dt.timedelta(hours=1))
    late = reserve(tenant_a, count=16)
    stats = reconcile_reservations(kube)
    assert stats.applied == 1 and stats.errors == 0
    assert set(_node_patches(cluster)) == {"h100-a"}  # the unhealthy and the foreign node are not touched
    assert claimed_by(cluster.stored(NODE, "h100-a"))[0] == "bravo"
    first.refresh_from_db()
    late.refresh_from_db()
    assert first.status_claimed_nodes == ["h100-a"]
    assert late.status_claimed_nodes == [] and late.status_claimed_gpus == 0
    assert late.status_message.startswith("holds 0 of 16 H100 GPUs: not enough Ready, healthy, schedulable H100 nodes")
    assert "1 held by other reservations, 1 claimed outside Gryvia, 1 not usable" in late.status_message


def test_a_node_changed_since_the_list_is_not_overwritten(cluster, kube, tenant_a):
    cluster.seed(gpu_node("g"))
    reservation = reserve(tenant_a)

    class Racing:
        """The health agent taints the node between the reconciler's LIST and its apply."""

        def __getattr__(self, name):
            return getattr(kube, name)

        def list(self, kind, **kw):
            nodes = kube.list(kind, **kw)
            changed = gpu_node("g", taints=[UNHEALTHY])
            changed["metadata"]["resourceVersion"] = "1000"
            cluster.seed(changed)
            for node in nodes:
                node["metadata"]["resourceVersion"] = "999"
            return nodes

    stats = reconcile_reservations(Racing())
    assert stats.errors == 1 and stats.applied == 0
    assert cluster.stored(NODE, "g")["spec"]["taints"] == [UNHEALTHY]  # the agent's taint was not lost
    reservation.refresh_from_db()
    assert reservation.status_claimed_nodes == [] and "cannot claim node g: ConflictError" in reservation.status_message
    with pytest.raises(ConflictError):
        kube.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "g", "resourceVersion": "1"}})
    reconcile_reservations(kube)  # next pass, fresh LIST: the node is unhealthy now, so it is not claimed
    assert claimed_by(cluster.stored(NODE, "g")) == (None, None, [])


def test_the_reservation_status_is_in_the_api(cluster, kube, tenant_a, client_a):
    cluster.seed(gpu_node("g"))
    reservation = reserve(tenant_a, count=4)
    reconcile_reservations(kube)
    body = client_a.get(f"/api/v1/reservations/{reservation.pk}/").json()
    assert body["status"]["claimed_nodes"] == ["g"] and body["status"]["claimed_gpus"] == 8
    assert body["status"]["message"] == "holds 8 H100 GPUs on 1 node(s) (whole nodes, 4 reserved)"
    assert body["status"]["updated_at"]


def test_a_reservation_keeps_other_tenants_jobs_off_the_reserved_gpus(cluster, kube, tenant_a, tenant_b):
    """Acceptance: after the claim, placement (with the claims read from the labelled nodes) never puts tenant B's
    job on tenant A's claimed nodes, while A's jobs may use them."""
    for name in ("n1", "n2", "n3"):
        cluster.seed(gpu_node(name))
    reserve(tenant_a, count=16)
    reconcile_reservations(kube)
    nodes = kube.list(NODE)
    claims = reservation_claims(nodes, {"alpha": tenant_a.pk, "bravo": tenant_b.pk})
    assert sorted(name for name, holder in claims.items() if holder == tenant_a.pk) == ["n1", "n2"]
    views = node_views(nodes, allocated={})  # what the job reconciler gives placement
    for strategy in ("pack", "spread"):
        kw = {"gpu_type": "H100", "nodes": views, "strategy": strategy, "reserved_for": claims}
        for pods, per_pod in ((1, 1), (1, 8), (8, 1)):
            b = place(pods=pods, gpus_per_pod=per_pod, tenant_id=tenant_b.pk, **kw)
            assert b is not None and set(b.nodes) == {"n3"}
        assert place(pods=2, gpus_per_pod=8, tenant_id=tenant_b.pk, **kw) is None  # n1 and n2 are not B's
        a = place(pods=3, gpus_per_pod=8, tenant_id=tenant_a.pk, **kw)
        assert a is not None and set(a.nodes) == {"n1", "n2", "n3"}


# --- the local backend -----------------------------------------------------------------------------------------


def test_the_local_node_is_claimed_and_released_like_a_cluster_node(monkeypatch, tenant_a):
    inventory = GpuInventory(count=8, simulated=True, models=("NVIDIA H100 80GB HBM3",))
    monkeypatch.setattr("apps.cluster.backends.local.backend.gpu_inventory", lambda: inventory)
    backend = LocalBackend()
    try:
        reservation = reserve(tenant_a, count=8)
        stale = backend.list(NODE)[0]["metadata"]["resourceVersion"]
        assert reconcile_reservations(backend).applied == 1
        (node,) = backend.list(NODE)
        assert claimed_by(node)[:2] == ("alpha", str(reservation.pk))
        assert node["metadata"]["labels"]["gryvia.io/simulated-gpus"] == "true"  # the machine's labels stay
        assert reconcile_reservations(backend).applied == 0  # the claim persists across reads of the node
        with pytest.raises(ConflictError):
            backend.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "local", "resourceVersion": stale}})
        assert reconcile_reservations(backend, now=reservation.end_at).deleted == 1
        (node,) = backend.list(NODE)
        assert claimed_by(node) == (None, None, []) and node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    finally:
        backend.close()


# --- the selector admission will use ---------------------------------------------------------------------------


def test_reserved_gpus_sums_active_reservations_per_tenant_and_type(tenant_a, tenant_b):
    reserve(tenant_a, count=8)
    reserve(tenant_a, count=4)
    reserve(tenant_a, gpu_type="A100", count=2)
    reserve(tenant_b, count=1, start=NOW + dt.timedelta(hours=1))  # not started yet
    ended = reserve(tenant_b, count=3, start=NOW - dt.timedelta(hours=5))  # ended an hour ago
    assert selectors.reserved_gpus(NOW) == {tenant_a.pk: {"H100": 12, "A100": 2}}
    assert selectors.reserved_gpus(NOW + dt.timedelta(hours=1, minutes=1)) == {
        tenant_a.pk: {"H100": 12, "A100": 2},
        tenant_b.pk: {"H100": 1},
    }
    assert selectors.reserved_gpus(ended.start_at) == {tenant_b.pk: {"H100": 3}}
    assert Reservation.all_tenants.count() == 5
