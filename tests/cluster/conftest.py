"""The Kubernetes backend's tests share an emulated API server on loopback and a backend pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from apps.cluster.backends.kubernetes import KubernetesBackend
from tests.kmock_cluster import KmockCluster, running_kmock


@pytest.fixture
def cluster() -> Iterator[KmockCluster]:
    with running_kmock() as running:
        yield running


@pytest.fixture
def backend(cluster: KmockCluster) -> Iterator[KubernetesBackend]:
    be = KubernetesBackend.for_host(cluster.url, qps=1000, burst=1000, timeout_s=5.0)
    yield be
    be.close()
