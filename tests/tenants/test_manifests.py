"""Every manifest the tenant reconciler builds is valid Kubernetes 1.33 (kubernetes-validate --strict)."""

from __future__ import annotations

import kubernetes_validate
import pytest

from apps.tenants import manifests
from apps.tenants.models import Membership, Tenant


def _tenant(**kw) -> Tenant:
    return Tenant(slug="alpha", labels={"team": "ml"}, **kw)


MEMBERS = [
    Membership(role="owner", cluster_identity="alice@example.com"),
    Membership(role="viewer", cluster_identity="bob@example.com"),
    Membership(role="member", cluster_identity=""),
]


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"max_gpus": 8, "gpu_type_ceilings": {"H100": 4, "A100": 8}, "max_cpu": "64", "max_memory": "256Gi"},
        {"max_cpu": "500m"},
    ],
    ids=["no-ceilings", "all-ceilings", "cpu-only"],
)
def test_tenant_manifests_validate_strictly(spec):
    objects = manifests.tenant_manifests(_tenant(**spec), MEMBERS)
    for obj in objects:
        kubernetes_validate.validate(obj, "1.33", strict=True)
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "Namespace" and "NetworkPolicy" in kinds and "LimitRange" in kinds
    assert ("ResourceQuota" in kinds) == bool(spec)


def test_quota_and_bindings_say_what_the_tenant_has():
    tenant = _tenant(max_gpus=8, gpu_type_ceilings={"H100": 4}, max_memory="256Gi")
    quota = manifests.resource_quota(tenant)
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/gpu-h100": "4",
        "requests.memory": "256Gi",
    }
    bindings = {b["metadata"]["name"]: b for b in manifests.role_bindings(tenant, MEMBERS)}
    assert set(bindings) == {"gryvia-tenant-admin", "gryvia-tenant-viewer"}  # the member has no cluster identity
    assert bindings["gryvia-tenant-admin"]["subjects"][0]["name"] == "alice@example.com"
    for obj in manifests.tenant_manifests(tenant, MEMBERS):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "gryvia" and labels["gryvia.io/tenant"] == "alpha"


def test_network_policy_isolates_tenants_from_each_other():
    policy = manifests.network_policy(_tenant())["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert {"podSelector": {}} in policy["ingress"][0]["from"]
    internet = policy["egress"][-1]["to"][0]["ipBlock"]
    assert internet["cidr"] == "0.0.0.0/0" and "10.0.0.0/8" in internet["except"]
