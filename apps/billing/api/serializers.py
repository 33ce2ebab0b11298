"""Input and output of the billing API (strict: unknown fields are errors)."""

from __future__ import annotations

import datetime as dt

from rest_framework import serializers

from apps.core.api.serializers import ManifestSerializerMixin, StrictModelSerializer, StrictSerializer

from .. import selectors
from ..models import GpuSku, UsageRecord
from ..services.metering import MAX_BATCH


class GpuSkuSerializer(ManifestSerializerMixin, StrictModelSerializer):
    """A catalog price; also accepted as a `GryviaGpuSku` manifest (`metadata.name`, camelCase `spec`)."""

    manifest_kind = "GryviaGpuSku"
    hourly_rate = serializers.DecimalField(max_digits=20, decimal_places=6, min_value=0, max_value=10**6)
    cpu_core_hour_rate = serializers.DecimalField(
        max_digits=20, decimal_places=6, min_value=0, max_value=10**6, required=False
    )
    memory_gib_hour_rate = serializers.DecimalField(
        max_digits=20, decimal_places=6, min_value=0, max_value=10**6, required=False
    )
    effective_from = serializers.DateTimeField(default_timezone=dt.UTC)
    effective_to = serializers.DateTimeField(default_timezone=dt.UTC, required=False, allow_null=True)

    class Meta:
        model = GpuSku
        fields = (
            "name",
            "gpu_type",
            "hourly_rate",
            "cpu_core_hour_rate",
            "memory_gib_hour_rate",
            "currency",
            "effective_from",
            "effective_to",
            "description",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")
        # Uniqueness is the service's to check (with a message naming the SKU).
        extra_kwargs = {"name": {"validators": []}}

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["name"].read_only = True
        return fields


class UsageEventSerializer(serializers.Serializer):
    """Documentation of one event (the service checks events itself, fast, and names `events[i].field`)."""

    id = serializers.CharField(max_length=200, help_text="Unique per event in the tenant: re-sending it is a no-op")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    gpu_type = serializers.CharField(required=False, help_text="Priced by the SKU of this type in force at start")
    sku = serializers.CharField(required=False, help_text="Or priced by this SKU")
    gpus = serializers.IntegerField(required=False, default=1, min_value=0)
    cpu_cores = serializers.DecimalField(max_digits=14, decimal_places=3, required=False)
    memory_gib = serializers.DecimalField(max_digits=14, decimal_places=3, required=False)
    job = serializers.CharField(required=False)
    queue = serializers.CharField(required=False)


class UsageEventBatchSerializer(StrictSerializer):
    events = serializers.ListField(child=serializers.JSONField(), max_length=MAX_BATCH, allow_empty=False)


class UsageEventBatchDocSerializer(serializers.Serializer):
    events = UsageEventSerializer(many=True, help_text=f"1 to {MAX_BATCH} events")


class IngestResultSerializer(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Events durably stored (now, or by an earlier batch)")
    new = serializers.IntegerField(help_text="Events stored by this batch")
    duplicates = serializers.IntegerField(help_text="Events already stored (same id): nothing changed")


class UsageRecordSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = UsageRecord
        fields = (
            "uid",
            "tenant",
            "name",
            "kind",
            "event_id",
            "job_name",
            "job_uid",
            "run",
            "queue_name",
            "model",
            "sku_name",
            "gpu_type",
            "gpus",
            "cpu_cores",
            "memory_gib",
            "input_tokens",
            "output_tokens",
            "start",
            "end",
            "gpu_hours",
            "rate",
            "cost",
            "currency",
            "final",
            "refreshed_at",
        )
        read_only_fields = fields


class BillingUsageMetricsSerializer(serializers.Serializer):
    records = serializers.IntegerField()
    open = serializers.IntegerField(help_text="Runs still going (hours and cost as last refreshed)")
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=20, decimal_places=6)
    currency = serializers.CharField()


class BillingUsageRowSerializer(BillingUsageMetricsSerializer):
    """One group: the fields named in `group_by` (the others are absent), then the metrics."""

    tenant = serializers.CharField(source="tenant__slug", required=False)
    queue = serializers.CharField(source="queue_name", required=False)
    job = serializers.CharField(source="job_name", required=False)
    sku = serializers.CharField(source="sku_name", required=False)
    model = serializers.CharField(required=False)
    kind = serializers.CharField(required=False)
    day = serializers.DateField(required=False)

    class Meta:
        fields = (*selectors.USAGE_GROUPS, *selectors.USAGE_METRICS)

    def get_fields(self):
        fields = super().get_fields()
        return {name: fields[name] for name in self.Meta.fields}


class BillingUsageReportSerializer(serializers.Serializer):
    start = serializers.DateTimeField(default_timezone=dt.UTC)
    end = serializers.DateTimeField(default_timezone=dt.UTC)
    group_by = serializers.ListField(child=serializers.ChoiceField(choices=selectors.USAGE_GROUPS))
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = BillingUsageRowSerializer(many=True)
    totals = BillingUsageMetricsSerializer(many=True, help_text="Per currency, over the whole window")


class LedgerProblemSerializer(serializers.Serializer):
    sequence = serializers.IntegerField()
    problem = serializers.CharField()


class LedgerVerificationSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    entries = serializers.IntegerField()
    valid = serializers.BooleanField()
    problems = LedgerProblemSerializer(many=True)
    headSequence = serializers.IntegerField()  # noqa: N815 - the upstream's response field names
    headHash = serializers.CharField()  # noqa: N815
    hashVersion = serializers.CharField()  # noqa: N815
