"""`/api/v1/audit/`: the audit log, for platform staff (everything) and tenant admins (their tenant)."""

from rest_framework import mixins, serializers

from apps.core.models import AuditEntry

from .filters import AuditEntryFilterSet
from .viewsets import TenantScopedViewSet


class AuditEntrySerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant_slug")

    class Meta:
        model = AuditEntry
        fields = (
            "id",
            "created_at",
            "tenant",
            "actor",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
        )


class AuditEntryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    model = AuditEntry
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
    action_scopes = {"list": "admin", "retrieve": "admin"}
    lookup_field = "id"
    lookup_value_regex = "[0-9]+"
