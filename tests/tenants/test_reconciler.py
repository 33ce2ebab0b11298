"""The tenant reconciler, against kmock (a real HTTP Kubernetes emulator) and against the local backend."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.cluster.backends.base import (
    LIMIT_RANGE,
    NAMESPACE,
    NETWORK_POLICY,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    ForbiddenError,
)
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.cluster.backends.local import LocalBackend
from apps.core.locks import try_advisory_lock
from apps.core.models import AuditEntry
from apps.tenants import manifests, services
from apps.tenants.models import Tenant
from apps.tenants.reconciler import TenantReconciler, reconcile_tenants
from tests.factories import ACTOR, make_tenant, make_user
from tests.kmock_cluster import KmockCluster, running_kmock

pytestmark = pytest.mark.django_db
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
def cluster():
    with running_kmock() as running:
        yield running


@pytest.fixture
def kube(cluster: KmockCluster):
    backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    yield backend
    backend.close()


def _writes(cluster: KmockCluster) -> list[str]:
    return [f"{r.method} {r.path}" for r in cluster.requests() if r.method in WRITES]


def _tenant_with_everything() -> Tenant:
    tenant = make_tenant("alpha", max_gpus=8, gpu_type_ceilings={"H100": 4}, max_memory="256Gi")
    services.membership_add(actor=ACTOR, tenant=tenant, user=make_user("alice"), role="admin", cluster_identity="alice")
    return Tenant.objects.get(pk=tenant.pk)


def test_creates_once_then_a_second_pass_writes_nothing(cluster, kube):
    tenant = _tenant_with_everything()
    first = reconcile_tenants(kube)
    assert first.applied == 5 and first.errors == 0
    assert sorted(_writes(cluster)) == sorted(
        [
            "PATCH /api/v1/namespaces/tenant-alpha",
            "PATCH /api/v1/namespaces/tenant-alpha/resourcequotas/tenant-quota",
            "PATCH /api/v1/namespaces/tenant-alpha/limitranges/tenant-limits",
            "PATCH /apis/networking.k8s.io/v1/namespaces/tenant-alpha/networkpolicies/tenant-isolation",
            "PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/tenant-alpha/rolebindings/gryvia-tenant-admin",
        ]
    )
    for request in cluster.requests("PATCH"):
        assert request.content_type == "application/apply-patch+yaml"
        assert request.query["fieldManager"] == "gryvia" and request.query["force"] == "true"
    quota = cluster.stored(RESOURCE_QUOTA, "tenant-quota", "tenant-alpha")
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    tenant.refresh_from_db()
    assert tenant.status_phase == "Ready" and tenant.observed_generation == tenant.generation
    assert "ResourceQuota/tenant-alpha/tenant-quota" in tenant.status_applied

    cluster.clear_requests()
    with CaptureQueriesContext(connection) as queries:
        second = reconcile_tenants(kube)
    assert second.applied == 0 and second.lists == 5
    assert _writes(cluster) == []
    assert len(cluster.requests("GET")) == 5  # one LIST per kind
    assert not [q["sql"] for q in queries if q["sql"].split()[0] in ("INSERT", "UPDATE", "DELETE")]


def test_a_spec_change_reapplies_only_what_changed(cluster, kube):
    tenant = _tenant_with_everything()
    reconcile_tenants(kube)
    cluster.clear_requests()
    services.tenant_update(actor=ACTOR, tenant=tenant, max_gpus=16)
    stats = reconcile_tenants(kube)
    assert stats.applied == 1
    assert _writes(cluster) == ["PATCH /api/v1/namespaces/tenant-alpha/resourcequotas/tenant-quota"]
    assert (
        cluster.stored(RESOURCE_QUOTA, "tenant-quota", "tenant-alpha")["spec"]["hard"]["requests.nvidia.com/gpu"]
        == "16"
    )


def test_removing_the_last_ceiling_deletes_the_quota(cluster, kube):
    tenant = make_tenant("alpha", max_gpus=2)
    reconcile_tenants(kube)
    services.tenant_update(actor=ACTOR, tenant=tenant, max_gpus=None)
    assert reconcile_tenants(kube).deleted == 1
    assert cluster.stored(RESOURCE_QUOTA, "tenant-quota", "tenant-alpha") is None


def test_drift_in_the_cluster_is_repaired(cluster, kube):
    _tenant_with_everything()
    reconcile_tenants(kube)
    kube.delete(
        __import__("apps.cluster.backends.base", fromlist=["ObjectRef"]).ObjectRef(
            NETWORK_POLICY, "tenant-isolation", "tenant-alpha"
        )
    )
    cluster.clear_requests()
    assert reconcile_tenants(kube).applied == 1
    assert cluster.stored(NETWORK_POLICY, "tenant-isolation", "tenant-alpha") is not None


def test_archiving_removes_the_tenants_objects(cluster, kube):
    tenant = _tenant_with_everything()
    keep = make_tenant("bravo")
    reconcile_tenants(kube)
    services.tenant_archive(actor=ACTOR, tenant=tenant)
    stats = reconcile_tenants(kube)
    assert stats.orphans == 5
    for kind, name, ns in [
        (NAMESPACE, "tenant-alpha", None),
        (RESOURCE_QUOTA, "tenant-quota", "tenant-alpha"),
        (LIMIT_RANGE, "tenant-limits", "tenant-alpha"),
        (NETWORK_POLICY, "tenant-isolation", "tenant-alpha"),
        (ROLE_BINDING, "gryvia-tenant-admin", "tenant-alpha"),
    ]:
        assert cluster.stored(kind, name, ns) is None
    assert cluster.stored(NAMESPACE, keep.namespace) is not None
    deletes = [r.path for r in cluster.requests("DELETE")]
    assert deletes[-1] == "/api/v1/namespaces/tenant-alpha"  # the namespace goes last
    tenant.refresh_from_db()
    assert tenant.status_phase == "Archived"


def test_an_object_with_our_labels_but_no_owner_is_collected(cluster, kube):
    make_tenant("alpha")
    labels = {**manifests.labels_for("ghost")}
    cluster.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-ghost", "labels": labels}})
    unlabelled = {k: v for k, v in labels.items() if k != manifests.TENANT_LABEL}
    cluster.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "no-owner", "labels": unlabelled}})
    cluster.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "not-ours", "labels": {"a": "b"}}})
    stats = reconcile_tenants(kube)
    assert stats.orphans == 2
    assert cluster.stored(NAMESPACE, "tenant-ghost") is None and cluster.stored(NAMESPACE, "no-owner") is None
    assert cluster.stored(NAMESPACE, "not-ours") is not None and cluster.stored(NAMESPACE, "tenant-alpha") is not None


def test_cluster_errors_reach_the_status_and_the_audit_log(cluster, kube):
    tenant = make_tenant("alpha", max_gpus=1)
    cluster.react(
        "patch /api/v1/namespaces/tenant-alpha/resourcequotas/tenant-quota",
        403,
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "quota admission denied", "code": 403},
    )
    assert reconcile_tenants(kube).errors == 1
    tenant.refresh_from_db()
    assert tenant.status_phase == "Error" and "quota admission denied" in tenant.status_message
    assert tenant.observed_generation != tenant.generation
    errors = AuditEntry.all_tenants.filter(tenant=tenant, action="tenant.reconcile_error")
    assert errors.count() == 1 and "quota admission denied" in errors.get().after["status_message"]


class RefusingBackend(LocalBackend):
    """Refuses every ResourceQuota, as an admission webhook would."""

    def apply(self, manifest):
        if manifest["kind"] == "ResourceQuota":
            raise ForbiddenError("admission webhook denied the request")
        return super().apply(manifest)


def test_a_repeated_error_is_audited_once_and_recovery_clears_it():
    tenant = make_tenant("alpha", max_gpus=1)
    refusing = RefusingBackend()
    for _ in range(3):
        assert reconcile_tenants(refusing).errors == 1
    assert AuditEntry.all_tenants.filter(tenant=tenant, action="tenant.reconcile_error").count() == 1
    recovered = LocalBackend()
    assert reconcile_tenants(recovered).errors == 0
    tenant.refresh_from_db()
    assert tenant.status_phase == "Ready" and tenant.observed_generation == tenant.generation


def test_an_unreachable_cluster_leaves_everything_as_it_was(db):
    tenant = make_tenant("alpha")
    dead = KubernetesBackend.for_host("http://127.0.0.1:9", timeout_s=0.5)
    stats = reconcile_tenants(dead)
    assert stats.errors == 1 and stats.applied == 0
    tenant.refresh_from_db()
    assert tenant.status_phase == "Pending"


def test_ten_thousand_unchanged_tenants_cost_one_list_per_kind_and_no_write(settings):
    Tenant.objects.bulk_create([Tenant(slug=f"bulk{i}", max_gpus=i % 4 or None) for i in range(10_000)])
    backend = LocalBackend()
    settings.GRYVIA_RECONCILE_MAX_PER_PASS = 20_000
    settings.GRYVIA_RECONCILE_BUDGET_S = 600
    first = reconcile_tenants(backend)
    assert first.reconciled == 10_000 and not first.truncated
    backend.calls.clear()
    started = time.monotonic()
    with CaptureQueriesContext(connection) as queries:
        second = reconcile_tenants(backend)
    elapsed = time.monotonic() - started
    assert second.examined == 10_000 and second.reconciled == 0
    assert backend.calls == {"list": 5}
    assert not [q["sql"] for q in queries if q["sql"].split()[0] in ("INSERT", "UPDATE", "DELETE")]
    print(f"no-op pass over 10,000 tenants: {elapsed:.2f}s, {len(queries)} queries")


def test_a_pass_is_bounded_by_count_and_continues_next_time(settings):
    for i in range(5):
        make_tenant(f"b{i}")
    backend = LocalBackend()
    settings.GRYVIA_RECONCILE_MAX_PER_PASS = 2
    first = reconcile_tenants(backend)
    assert first.reconciled == 2 and first.truncated
    assert len(backend.list(NAMESPACE)) == 2
    reconcile_tenants(backend)
    reconcile_tenants(backend)
    assert len(backend.list(NAMESPACE)) == 5
    assert Tenant.objects.filter(status_phase="Ready").count() == 5


def test_a_pass_is_skipped_while_another_holds_the_lock():
    """Another process (here: another thread with its own database connection) holds the pass lock."""
    make_tenant("alpha")
    backend = LocalBackend()
    held, release = threading.Event(), threading.Event()

    def holder():
        with try_advisory_lock("reconcile:tenant") as got:
            assert got
            held.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        stats = TenantReconciler(backend).run_pass()
    finally:
        release.set()
        thread.join()
    assert stats.skipped and backend.calls == {}
    assert not TenantReconciler(backend).run_pass().skipped
