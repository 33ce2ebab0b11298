"""Input and output of queues, cohorts, priority classes and reservations (strict: unknown fields are errors)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.serializers import ManifestSerializerMixin, StrictModelSerializer

from ..choices import RESOURCES
from ..models import Cohort, PriorityClass, Queue, Reservation

_QUANTITY_SCHEMA = {
    "oneOf": [{"type": "integer", "minimum": 0}, {"type": "string"}],
    "description": "GPUs: a non-negative integer; cpu and memory: a Kubernetes quantity such as 64, 500m or 256Gi",
}


@extend_schema_field(_QUANTITY_SCHEMA)
class QuantityField(serializers.JSONField):
    pass


class QuotaSerializer(serializers.Serializer):
    """One quota entry (documentation only: the service validates `quotas` as a whole)."""

    resource = serializers.ChoiceField(choices=RESOURCES)
    flavor = serializers.CharField(required=False, allow_blank=True, help_text="GPU type (nvidia.com/gpu only)")
    nominal = QuantityField()
    borrowingLimit = QuantityField(required=False, allow_null=True, help_text="null: unlimited")  # noqa: N815
    lendingLimit = QuantityField(required=False, allow_null=True, help_text="null: unlimited")  # noqa: N815


@extend_schema_field(QuotaSerializer(many=True))
class QuotasField(serializers.JSONField):
    pass


class QueueStatusSerializer(serializers.Serializer):
    admitted = serializers.JSONField(source="status_admitted", help_text="resource key -> quantity in use")
    pending = serializers.IntegerField(source="status_pending")
    updated_at = serializers.DateTimeField(source="status_updated_at")


class QueueSerializer(ManifestSerializerMixin, StrictModelSerializer):
    manifest_kind = "GryviaQueue"

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cohort = serializers.SlugRelatedField(
        slug_field="name", queryset=Cohort.objects.all(), required=False, allow_null=True
    )
    weight = serializers.FloatField(required=False)
    quotas = QuotasField(required=False)
    status = QueueStatusSerializer(source="*", read_only=True)

    class Meta:
        model = Queue
        fields = ("name", "tenant", "cohort", "weight", "quotas", "generation", "created_at", "status")
        read_only_fields = ("generation", "created_at")

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None:  # queues are addressed by name: it never changes
            fields["name"].read_only = True
        return fields


class CohortSerializer(ManifestSerializerMixin, StrictModelSerializer):
    manifest_kind = "GryviaCohort"

    class Meta:
        model = Cohort
        fields = ("name", "description", "created_at", "updated_at")
        read_only_fields = ("created_at", "updated_at")

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None:
            fields["name"].read_only = True
        return fields


class PriorityClassSerializer(ManifestSerializerMixin, StrictModelSerializer):
    manifest_kind = "GryviaPriorityClass"

    # Declared, so DRF adds no generic unique validator: the service says which class is the default.
    is_default = serializers.BooleanField(required=False, help_text="at most one priority class is the default")

    class Meta:
        model = PriorityClass
        fields = ("name", "value", "preemption_policy", "description", "is_default", "created_at", "updated_at")
        read_only_fields = ("created_at", "updated_at")

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None:
            fields["name"].read_only = True
        return fields


class ReservationStatusSerializer(serializers.Serializer):
    claimed_nodes = serializers.ListField(
        child=serializers.CharField(), source="status_claimed_nodes", help_text="nodes claimed for the reservation"
    )
    claimed_gpus = serializers.IntegerField(source="status_claimed_gpus", help_text="GPUs on the claimed nodes")
    message = serializers.CharField(source="status_message", help_text="what it holds, or what is short and why")
    updated_at = serializers.DateTimeField(source="status_updated_at")


class ReservationSerializer(StrictModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    count = serializers.IntegerField(min_value=1)
    active = serializers.SerializerMethodField()
    status = ReservationStatusSerializer(source="*", read_only=True)

    class Meta:
        model = Reservation
        fields = (
            "id",
            "tenant",
            "gpu_type",
            "count",
            "start_at",
            "end_at",
            "description",
            "active",
            "created_at",
            "status",
        )
        read_only_fields = ("id", "created_at")

    def get_active(self, reservation: Reservation) -> bool:
        return reservation.is_active()
