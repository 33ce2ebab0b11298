"""FilterSets shared by the API and the admin."""

import django_filters

from ..models import ApiKey, Tenant


class TenantFilterSet(django_filters.FilterSet):
    slug = django_filters.CharFilter(lookup_expr="icontains")
    phase = django_filters.CharFilter(field_name="status_phase")

    class Meta:
        model = Tenant
        fields = ("slug", "suspended", "phase")


class ApiKeyFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    revoked = django_filters.BooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = ApiKey
        fields = ("name", "is_platform", "revoked")
