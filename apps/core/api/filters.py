"""FilterSets of core objects, shared by the API and the admin."""

import django_filters

from apps.core.models import AuditEntry


class AuditEntryFilterSet(django_filters.FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant_slug")
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = AuditEntry
        fields = ("action", "object_type", "object_id", "actor", "tenant", "since")
