"""Priority classes reconciled to Kubernetes PriorityClasses (against kmock), and named by job pods."""

from __future__ import annotations

import kubernetes_validate
import pytest

from apps.cluster.backends.base import PRIORITY_CLASS
from apps.cluster.backends.kubernetes import KubernetesBackend
from apps.jobs import manifests
from apps.jobs.spec import JobSpec, normalize_spec
from apps.queueing import services
from apps.queueing.reconciler import reconcile_priority_classes
from tests.kmock_cluster import running_kmock

pytestmark = pytest.mark.django_db


def test_priority_classes_are_applied_once_updated_and_collected(tenant_a):
    from tests.factories import ACTOR

    high = services.priority_class_create(actor=ACTOR, name="high", value=1000, description="urgent work")
    services.priority_class_create(actor=ACTOR, name="batch", value=10, preemption_policy="Never")
    with running_kmock() as cluster:
        backend = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
        assert reconcile_priority_classes(backend).applied == 2
        stored = cluster.stored(PRIORITY_CLASS, "gryvia-high")
        assert stored["value"] == 1000 and stored["globalDefault"] is False
        kubernetes_validate.validate({k: v for k, v in stored.items() if k != "status"}, "1.33", strict=True)
        assert cluster.stored(PRIORITY_CLASS, "gryvia-batch")["preemptionPolicy"] == "Never"
        cluster.clear_requests()
        assert reconcile_priority_classes(backend).applied == 0
        assert [r for r in cluster.requests() if r.method != "GET"] == []  # a second pass writes nothing
        services.priority_class_update(actor=ACTOR, priority_class=high, value=2000)
        assert reconcile_priority_classes(backend).applied == 1
        assert cluster.stored(PRIORITY_CLASS, "gryvia-high")["value"] == 2000
        services.priority_class_delete(actor=ACTOR, priority_class=high)
        assert reconcile_priority_classes(backend).orphans == 1
        assert cluster.stored(PRIORITY_CLASS, "gryvia-high") is None
        backend.close()


def test_job_pods_name_the_kubernetes_priority_class():
    spec = JobSpec.of(normalize_spec({"type": "training", "image": "x", "priorityClassName": "high"}))
    job = manifests.workload(spec, name="j", namespace="tenant-a", uid="u", tenant="a", api_url="http://g")
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "gryvia-high"
    kubernetes_validate.validate(job, "1.33", strict=True)
