"""Topology-aware placement: filters, scores, same-rack groups, reservations, no partial placement, affinity."""

from __future__ import annotations

import kubernetes_validate
import pytest

from apps.queueing.placement import (
    UNKNOWN_TENANT,
    NodeView,
    node_affinity,
    place,
    reservation_claim,
    reservation_claims,
)

TENANT = 1
OTHER = 2


def node(name, free=8, *, rack="r1", gpu_type="H100", memory=81559, rdma=True, **kw):
    return NodeView(name=name, gpu_type=gpu_type, free_gpus=free, memory_mib=memory, rdma=rdma, rack=rack, **kw)


def _place(nodes, *, pods=2, gpus_per_pod=4, **kw):
    kw.setdefault("gpu_type", "H100")
    kw.setdefault("tenant_id", TENANT)
    return place(pods=pods, gpus_per_pod=gpus_per_pod, nodes=nodes, **kw)


def test_same_rack_wins_over_a_better_node_in_another_rack():
    nodes = [
        node("a-1", 4, rack="rack-a", memory=40960),
        node("a-2", 4, rack="rack-a", memory=40960),
        node("b-1", 4, rack="rack-b", memory=81920),  # best score, but rack-b cannot hold both pods
    ]
    free_choice = _place(nodes)
    assert "b-1" in free_choice.nodes

    result = _place(nodes, same="rack")
    assert sorted(result.nodes) == ["a-1", "a-2"]
    assert result.scores["b-1"] > result.scores["a-1"]
    assert result.scores == {"a-1": 110.0, "a-2": 110.0, "b-1": 115.0}  # 100 fill + 5 or 10 memory + 5 RDMA
    assert any("rack rack-b: cannot fit" in line for line in result.explanation)
    assert result.explanation[-1].startswith("pod 1 -> ")


def test_same_ib_block_excludes_unlabelled_nodes():
    nodes = [node("x", 8, ib_block=""), node("y", 4, ib_block="ib-1"), node("z", 4, ib_block="ib-1")]
    result = _place(nodes, same="ib_block")
    assert sorted(result.nodes) == ["y", "z"]
    assert "x: excluded, no ib_block label" in result.explanation


def test_unhealthy_node_is_never_chosen():
    nodes = [node("sick", 16, healthy=False), node("ok-1", 4), node("ok-2", 4)]
    for strategy in ("pack", "spread"):
        result = _place(nodes, strategy=strategy)
        assert "sick" not in result.nodes and "sick" not in result.scores
    assert _place([node("sick", 16, healthy=False), node("ok-1", 4)]) is None


def test_cordoned_wrong_type_and_rdma_filters():
    nodes = [
        node("cordoned", 8, unschedulable=True),
        node("a100", 8, gpu_type="A100"),
        node("no-rdma", 8, rdma=False),
        node("good", 8),
    ]
    result = _place(nodes, require_rdma=True)
    assert result.nodes == ["good", "good"] and list(result.scores) == ["good"]
    assert _place(nodes, gpu_type="h100", pods=1).nodes  # type match is case-insensitive
    assert _place(nodes, gpu_type=None, pods=4, require_rdma=True).node_names == ["a100", "good"]


def test_reservations():
    nodes = [node("theirs", 8), node("mine", 8, memory=1024), node("open", 4, memory=1024)]
    claims = {"theirs": OTHER, "mine": TENANT, "open": None}
    result = _place(nodes, reserved_for=claims)
    assert "theirs" not in result.nodes and "mine" in result.nodes
    assert "theirs: excluded, reserved for another tenant" in result.explanation
    other = _place(nodes, reserved_for=claims, tenant_id=OTHER, pods=1, gpus_per_pod=8)
    assert other.nodes == ["theirs"]


def test_no_partial_placement():
    assert _place([node("a", 4), node("b", 3)]) is None  # 7 of 8 GPUs
    assert _place([node("a", 7)], pods=1, gpus_per_pod=8) is None
    assert _place([node("a", 4), node("b", 4)]) is not None


def test_pack_and_spread_choose_differently():
    nodes = [node("big", 8), node("small", 4), node("other", 8)]
    pack = _place(nodes, strategy="pack", pods=1)
    spread = _place(nodes, strategy="spread", pods=1)
    assert pack.nodes == ["small"] and spread.nodes[0] in ("big", "other")
    assert _place([node("a", 8), node("b", 8)], strategy="pack").nodes == ["a", "a"]
    assert sorted(_place([node("a", 8), node("b", 8)], strategy="spread").nodes) == ["a", "b"]


def test_invalid_arguments():
    with pytest.raises(ValueError):
        _place([node("a")], pods=0)
    with pytest.raises(ValueError):
        _place([node("a")], strategy="random")


def test_reservation_claims_from_node_labels():
    nodes = [
        {"metadata": {"name": "n1", "labels": {"gryvia.io/reserved": "alpha"}}},
        {"metadata": {"name": "n2", "labels": {"gryvia.io/reserved": "ghost"}}},
        {"metadata": {"name": "n3", "labels": {}}},
    ]
    assert reservation_claims(nodes, {"alpha": 7}) == {"n1": 7, "n2": UNKNOWN_TENANT}


def test_affinity_and_reservation_claim_validate_in_a_job():
    affinity = node_affinity(["gpu-2", "gpu-1", "gpu-2"])
    term = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1", "gpu-2"]}]}
    taint, label, toleration = reservation_claim("alpha")
    assert taint == {"key": "gryvia.io/reserved", "value": "alpha", "effect": "NoSchedule"}
    assert label == {"gryvia.io/reserved": "alpha"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "t-alpha"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": affinity,
                    "tolerations": [toleration],
                    "nodeSelector": label,
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
                    ],
                },
            },
        },
    }
    kubernetes_validate.validate(job, "1.33", strict=True)
    node_obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": label},
        "spec": {"taints": [taint]},
    }
    kubernetes_validate.validate(node_obj, "1.33", strict=True)
    with pytest.raises(ValueError):
        node_affinity([])
