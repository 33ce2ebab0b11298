from __future__ import annotations

import re
from typing import Any

from django.contrib.auth import get_user_model
from rest_framework import serializers

from apps.core import scopes as S
from apps.core.api.serializers import ManifestSerializerMixin, StrictModelSerializer, StrictSerializer

from ..models import ApiKey, Membership, Tenant

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def validate_labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a mapping of label keys to values")
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > 253 or not _LABEL_KEY.match(key):
            raise serializers.ValidationError(f"{key!r} is not a valid Kubernetes label key")
        if key.startswith(("gryvia.io/", "app.kubernetes.io/", "kubernetes.io/")):
            raise serializers.ValidationError(f"{key!r} uses a prefix reserved for the platform")
        if not isinstance(item, str) or len(item) > 63 or not _LABEL_VALUE.match(item):
            raise serializers.ValidationError(f"value of {key!r} is not a valid Kubernetes label value")
    return value


def validate_quantity(value: str) -> str:
    if value and not _QUANTITY.match(value):
        raise serializers.ValidationError(f"{value!r} is not a Kubernetes quantity such as 64, 500m or 256Gi")
    return value


class TenantStatusSerializer(serializers.Serializer):
    phase = serializers.CharField(source="status_phase")
    message = serializers.CharField(source="status_message")
    applied = serializers.SerializerMethodField()
    observed_generation = serializers.IntegerField()
    reconciled_at = serializers.DateTimeField(source="status_reconciled_at")

    def get_applied(self, tenant: Tenant) -> list[str]:
        return sorted(tenant.status_applied or {})


class TenantSerializer(ManifestSerializerMixin, StrictModelSerializer):
    manifest_kind = "GryviaTenant"
    manifest_name_field = "slug"

    labels = serializers.JSONField(required=False, validators=[validate_labels])
    gpu_type_ceilings = serializers.DictField(child=serializers.IntegerField(min_value=0), required=False)
    max_cpu = serializers.CharField(required=False, allow_blank=True, max_length=20, validators=[validate_quantity])
    max_memory = serializers.CharField(required=False, allow_blank=True, max_length=20, validators=[validate_quantity])
    tokens_per_day = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**63 - 1,
        help_text="LLM gateway: input + output tokens per UTC day, all keys together; null: no limit",
    )
    namespace = serializers.CharField(read_only=True)
    status = TenantStatusSerializer(source="*", read_only=True)

    class Meta:
        model = Tenant
        fields = (
            "slug",
            "display_name",
            "labels",
            "suspended",
            "max_gpus",
            "gpu_type_ceilings",
            "max_cpu",
            "max_memory",
            "tokens_per_day",
            "namespace",
            "generation",
            "archived_at",
            "created_at",
            "status",
        )
        read_only_fields = ("generation", "archived_at", "created_at")

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None:  # the slug names the namespace: it never changes
            fields["slug"].read_only = True
        return fields


class MembershipSerializer(StrictModelSerializer):
    username = serializers.SlugRelatedField(
        source="user", slug_field="username", queryset=get_user_model().objects.all()
    )
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ("username", "tenant", "role", "cluster_identity", "created_at")
        read_only_fields = ("created_at",)

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None:
            fields["username"].read_only = True
        return fields


KEY_UPDATABLE = ("name", "expires_at", "allowed_models", "requests_per_minute", "tokens_per_minute", "tokens_per_day")


def _limit(help_text: str, max_value: int = 2**31 - 1) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=max_value, help_text=f"{help_text}; null: no limit"
    )


class ScopeField(serializers.ChoiceField):
    """One API scope; a wrong one is answered with the list of the right ones."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=sorted(S.ALL_SCOPES), **kwargs)

    def to_internal_value(self, data: Any) -> str:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:  # DRF's says only '"read" is not a valid choice.'
            raise serializers.ValidationError(S.not_a_scope(data)) from exc


class ApiKeySerializer(StrictModelSerializer):
    id = serializers.CharField(source="key_id", read_only=True)
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    scopes = serializers.ListField(child=ScopeField(), allow_empty=False)
    state = serializers.CharField(read_only=True)
    # LLM gateway limits, checked by the service (model names as apps.llm defines them).
    allowed_models = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        help_text="model names this key may call; empty: every model its tenant may use",
    )
    requests_per_minute = _limit("LLM gateway requests per minute")
    tokens_per_minute = _limit("LLM gateway input + output tokens per minute")
    tokens_per_day = _limit("LLM gateway input + output tokens per UTC day", 2**63 - 1)

    class Meta:
        model = ApiKey
        fields = (
            "id",
            "name",
            "tenant",
            "scopes",
            "is_platform",
            "state",
            "expires_at",
            "allowed_models",
            "requests_per_minute",
            "tokens_per_minute",
            "tokens_per_day",
            "revoked_at",
            "last_used_at",
            "previous_valid_until",
            "created_by",
            "created_at",
        )
        read_only_fields = ("revoked_at", "last_used_at", "previous_valid_until", "created_by", "created_at")


class ApiKeyUpdateSerializer(ApiKeySerializer):
    class Meta(ApiKeySerializer.Meta):
        read_only_fields = tuple(f for f in ApiKeySerializer.Meta.fields if f not in KEY_UPDATABLE)


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The plaintext key: shown once, never again")

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")


class ApiKeyRotateSerializer(StrictSerializer):
    grace_seconds = serializers.IntegerField(min_value=0, max_value=30 * 86400, default=3600)
