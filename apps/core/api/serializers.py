"""Serializer bases: unknown fields are errors, and objects with a manifest form accept it.

A manifest (`apiVersion: gryvia.io/v1alpha1`, `kind`, `metadata`, `spec`) is flattened into the serializer's
fields: `metadata.name` to the lookup field, `metadata.labels` to `labels`, camelCase `spec` keys to snake_case.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers
from rest_framework.settings import api_settings

API_VERSION = "gryvia.io/v1alpha1"
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


class StrictSerializerMixin:
    """Rejects input keys that are not writable fields of the serializer, naming them, together with the errors of
    the fields that are there: a caller fixes a document in one try, not one layer of errors per try."""

    def to_internal_value(self, data: Any) -> Any:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, dict):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = {name: ["unknown field"] for name in sorted(set(data) - writable, key=str)}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not unknown:
                raise
            known = exc.detail if isinstance(exc.detail, dict) else {api_settings.NON_FIELD_ERRORS_KEY: exc.detail}
            raise serializers.ValidationError({**unknown, **known}) from exc
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class StrictModelSerializer(StrictSerializerMixin, serializers.ModelSerializer):
    pass


class StrictSerializer(StrictSerializerMixin, serializers.Serializer):
    pass


class ManifestSerializerMixin:
    """Accepts a `gryvia.io/v1alpha1` manifest of `manifest_kind` as well as the flat JSON form."""

    manifest_kind: str = ""
    manifest_name_field: str = "name"

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and ("apiVersion" in data or "kind" in data):
            data = self.flatten_manifest(data)
        return super().to_internal_value(data)

    def flatten_manifest(self, data: dict[str, Any]) -> dict[str, Any]:
        errors: dict[str, list[str]] = {}
        if data.get("apiVersion") != API_VERSION:
            errors["apiVersion"] = [f"must be {API_VERSION!r}"]
        if data.get("kind") != self.manifest_kind:
            errors["kind"] = [f"must be {self.manifest_kind!r}"]
        extra = sorted(set(data) - {"apiVersion", "kind", "metadata", "spec"})
        for key in extra:
            errors[key] = ["unknown field"]
        metadata = data.get("metadata") or {}
        spec = data.get("spec") or {}
        if not isinstance(metadata, dict):
            errors["metadata"] = ["must be a mapping"]
        if not isinstance(spec, dict):
            errors["spec"] = ["must be a mapping"]
        if errors:
            raise serializers.ValidationError(errors)
        flat: dict[str, Any] = {}
        for key in sorted(set(metadata) - {"name", "labels"}):
            errors[f"metadata.{key}"] = ["unknown field"]
        if errors:
            raise serializers.ValidationError(errors)
        if "name" in metadata:
            flat[self.manifest_name_field] = metadata["name"]
        if "labels" in metadata:
            flat["labels"] = metadata["labels"]
        for key, value in spec.items():
            flat[snake(key)] = value
        return flat
