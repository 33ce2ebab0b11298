"""Fail-closed tenant scoping, the protected base viewset and ordered pagination."""

from __future__ import annotations

import pytest
from rest_framework.test import APIRequestFactory

from apps.core.api.pagination import OrderedLimitOffsetPagination, QuerySetNotOrdered
from apps.core.api.viewsets import TenantScopedViewSet
from apps.core.scoping import ALL_TENANTS, TenantScopeMissing, tenant_scope
from apps.tenants.models import ApiKey
from tests.factories import make_key

pytestmark = pytest.mark.django_db


def test_a_query_outside_any_scope_raises(tenant_a):
    make_key(tenant_a)
    with pytest.raises(TenantScopeMissing):
        list(ApiKey.objects.all())


def test_a_scope_sees_only_its_tenants(tenant_a, tenant_b):
    make_key(tenant_a)
    make_key(tenant_b)
    with tenant_scope(tenant_a):
        assert {k.tenant_id for k in ApiKey.objects.all()} == {tenant_a.pk}
    with tenant_scope([tenant_a.pk, tenant_b.pk]):
        assert ApiKey.objects.count() == 2
    with tenant_scope(ALL_TENANTS):
        assert ApiKey.objects.count() == 2
    with tenant_scope([]):
        assert ApiKey.objects.count() == 0
    with pytest.raises(TenantScopeMissing):  # the scope ends with the block
        ApiKey.objects.count()


@pytest.mark.parametrize("method", ["get_queryset", "get_object", "dispatch"])
def test_viewsets_cannot_drop_the_tenant_filter(method):
    with pytest.raises(TypeError, match=method):
        type("Leaky", (TenantScopedViewSet,), {method: lambda self: None})


def test_pagination_refuses_unordered_querysets(tenant_a):
    request = APIRequestFactory().get("/")
    from rest_framework.request import Request

    with tenant_scope(ALL_TENANTS), pytest.raises(QuerySetNotOrdered):
        OrderedLimitOffsetPagination().paginate_queryset(ApiKey.objects.order_by(), Request(request))


def test_pages_are_capped(client_a, tenant_a):
    for _ in range(3):
        make_key(tenant_a)
    body = client_a.get("/api/v1/api-keys/?limit=2").json()
    assert body["count"] == 4 and len(body["results"]) == 2 and "offset=2" in body["next"]
    assert OrderedLimitOffsetPagination.max_limit == 1000
