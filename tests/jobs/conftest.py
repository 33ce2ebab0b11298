"""Fixtures the job tests share."""

from __future__ import annotations

import pytest

from apps.cluster.backends import set_backend
from apps.cluster.backends.local import LocalBackend
from apps.tenants.reconciler import reconcile_tenants


@pytest.fixture
def local(tmp_path, tenant_a):
    """The local backend on a data dir of the test's own, with tenant_a's namespace."""
    backend = LocalBackend(data_dir=tmp_path)
    set_backend(backend)
    reconcile_tenants(backend)
    yield backend
    backend.close()
