"""Input and output of inference services and model aliases (strict: unknown fields are errors).

The upstream credential is write-only: responses say `has_credential` and nothing more.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.serializers import ManifestSerializerMixin, StrictModelSerializer

from .. import packaged, spec
from ..choices import Runtime, Task
from ..models import InferenceService, ModelAlias

# `spec` keys whose camelCase form the generic conversion would split wrongly (priceInputPer1M -> ..._per1_m).
_SPEC_KEYS = {
    "priceInputPer1M": "price_input_per_1m",
    "priceInputPer1m": "price_input_per_1m",
    "priceOutputPer1M": "price_output_per_1m",
    "priceOutputPer1m": "price_output_per_1m",
}


class ResourcesSerializer(serializers.Serializer):
    """Documentation only: the service checks `resources` as a whole."""

    gpus = serializers.IntegerField(required=False, min_value=0, max_value=64)
    cpu = serializers.CharField(required=False, help_text="Kubernetes quantity, e.g. 4 or 500m")
    memory = serializers.CharField(required=False, help_text="Kubernetes quantity, e.g. 16Gi")


@extend_schema_field(ResourcesSerializer)
class ResourcesField(serializers.JSONField):
    pass


class _SharedOrTenantSerializer(ManifestSerializerMixin, StrictModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    shared = serializers.BooleanField(
        required=False, help_text="Shared by the platform with every tenant (create only; platform admins only)"
    )

    def flatten_manifest(self, data: dict[str, Any]) -> dict[str, Any]:
        if isinstance(data.get("spec"), dict):
            data = {**data, "spec": {_SPEC_KEYS.get(k, k): v for k, v in data["spec"].items()}}
        return super().flatten_manifest(data)

    def to_representation(self, instance) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["shared"] = instance.tenant_id is None
        return data

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None:  # addressed by name; a shared object stays shared
            fields["name"].read_only = True
            fields["shared"].read_only = True
        return fields


class InferenceServiceStatusSerializer(serializers.Serializer):
    phase = serializers.CharField(source="status_phase")
    message = serializers.CharField(source="status_message")
    ready_replicas = serializers.IntegerField(source="status_ready_replicas")
    endpoint = serializers.CharField(source="status_endpoint", help_text="base URL the gateway sends requests to")
    observed_generation = serializers.IntegerField()


class InferenceServiceSerializer(_SharedOrTenantSerializer):
    manifest_kind = "GryviaInferenceService"

    name = serializers.CharField(max_length=63, help_text="DNS label, unique in the tenant (or among shared)")
    runtime = serializers.ChoiceField(choices=Runtime.choices)
    task = serializers.ChoiceField(
        choices=Task.choices, required=False, help_text="default: embeddings for sentence-transformers, else chat"
    )
    model = serializers.CharField(
        max_length=500,
        help_text="external: the upstream's model name; llamacpp, sentence-transformers: a packaged model "
        f"({', '.join(m.name for m in packaged.MODELS)}) or an absolute path; vllm, tgi: a model id",
    )
    model_name = serializers.CharField(
        required=False, allow_blank=True, max_length=100, help_text="what clients call (default: name)"
    )
    upstream_model = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=500,
        help_text="the name sent upstream (default: model for external services, else model_name)",
    )
    version = serializers.CharField(required=False, allow_blank=True, max_length=50)
    weight = serializers.IntegerField(required=False, min_value=0, max_value=spec.MAX_WEIGHT)
    url = serializers.CharField(
        required=False, allow_blank=True, max_length=500, help_text="external only: the upstream's base URL (…/v1)"
    )
    credential = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=4096,
        style={"input_type": "password"},
        help_text='the upstream\'s API key, stored encrypted and never shown; "" removes it',
    )
    has_credential = serializers.BooleanField(read_only=True)
    replicas = serializers.IntegerField(required=False, min_value=0, max_value=spec.MAX_REPLICAS)
    resources = ResourcesField(required=False)
    args = serializers.ListField(
        child=serializers.CharField(max_length=1000, allow_blank=True, trim_whitespace=False),
        required=False,
        max_length=spec.MAX_ARGS,
    )
    price_input_per_1m = serializers.DecimalField(
        max_digits=14, decimal_places=6, min_value=0, required=False, help_text="per million input tokens"
    )
    price_output_per_1m = serializers.DecimalField(
        max_digits=14, decimal_places=6, min_value=0, required=False, help_text="per million output tokens"
    )
    context_length = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=spec.MAX_INT32)
    enabled = serializers.BooleanField(required=False)
    status = InferenceServiceStatusSerializer(source="*", read_only=True)

    class Meta:
        model = InferenceService
        fields = (
            "name",
            "tenant",
            "shared",
            "runtime",
            "task",
            "model",
            "model_name",
            "upstream_model",
            "version",
            "weight",
            "url",
            "credential",
            "has_credential",
            "replicas",
            "resources",
            "args",
            "price_input_per_1m",
            "price_output_per_1m",
            "context_length",
            "enabled",
            "generation",
            "created_by",
            "created_at",
            "updated_at",
            "status",
        )
        read_only_fields = ("generation", "created_by", "created_at", "updated_at")
        validators: list[Any] = []  # the service checks names per tenant and among shared services


class ModelAliasSerializer(_SharedOrTenantSerializer):
    manifest_kind = "GryviaModelAlias"

    name = serializers.CharField(max_length=100, help_text="the model name clients call")
    targets = serializers.ListField(
        child=serializers.CharField(max_length=100),
        allow_empty=False,
        max_length=spec.MAX_ALIAS_TARGETS,
        help_text="model names, tried in this order",
    )

    class Meta:
        model = ModelAlias
        fields = ("name", "tenant", "shared", "targets", "created_at", "updated_at")
        read_only_fields = ("created_at", "updated_at")
        validators: list[Any] = []
