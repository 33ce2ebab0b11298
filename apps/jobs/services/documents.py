"""Reading a job document: a GryviaAIJob manifest (`apiVersion`, `kind`, `metadata.name`, `spec`) or the flat
`{"name", "spec"}`, as the REST API's submit and the dashboard's submit page take it. One check for both, so a
manifest the API refuses is refused with the same field paths and messages in the browser."""

from __future__ import annotations

from typing import Any

import yaml
from django.core.exceptions import ValidationError

from apps.core.api.serializers import API_VERSION

from .. import choices as C
from .jobs import job_validate

MANIFEST_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})
FLAT_KEYS = frozenset({"name", "spec"})


def job_document_load(text: str) -> dict[str, Any]:
    """The mapping a YAML (or JSON) document holds. ValidationError under `manifest` when it does not parse, is
    not a mapping or carries a NUL character (the API's YAML parser refuses the same)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError({"manifest": f"YAML parse error - {exc}"}) from exc
    if not isinstance(data, dict):
        raise ValidationError({"manifest": "must be a YAML mapping (a GryviaAIJob manifest)"})
    if _has_nul(data):
        raise ValidationError({"manifest": "a NUL character (\\u0000) is not allowed in any value or key"})
    return data


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def job_document_parse(data: Any, *, name_required: bool = True) -> tuple[Any, Any]:
    """`(name, spec)` of a job document, or ValidationError naming every bad field at once: the document's own
    (`apiVersion`, `kind`, `metadata.name`, unknown keys) and, through `job_validate`, the name's and the spec's
    (`spec.image`, ...)."""
    if not isinstance(data, dict):
        raise ValidationError({"body": "must be a JSON or YAML mapping"})
    errors: dict[str, list[str]] = {}
    if "apiVersion" in data or "kind" in data or "metadata" in data:
        allowed = MANIFEST_KEYS
        if data.get("apiVersion") != API_VERSION:
            errors["apiVersion"] = [f"must be {API_VERSION!r}"]
        if data.get("kind") != C.KIND:
            errors["kind"] = [f"must be {C.KIND!r}"]
        metadata = data.get("metadata")
        if not isinstance(metadata, dict):
            errors["metadata"] = ["must be a mapping with a name"]
            metadata = {}
        for key in sorted(set(metadata) - {"name"}):  # labels/annotations would be dropped: say so instead
            errors[f"metadata.{key}"] = ["unknown field (a job's metadata has only a name)"]
        name = metadata.get("name")
        field = "metadata.name"
    else:
        allowed = FLAT_KEYS
        name = data.get("name")
        field = "name"
    for key in sorted(set(data) - allowed, key=str):
        errors[str(key)] = ["unknown field"]
    if "spec" not in data:
        errors["spec"] = ["is required"]
    if name is None and name_required:
        errors[field] = ["is required"]
    if errors:
        raise ValidationError({**errors, **_content_errors(name, data)})
    return name, data["spec"]


def _content_errors(name: Any, data: dict[str, Any]) -> dict[str, list[str]]:
    """The name's and the spec's own errors, reported with the document's: every error of a manifest in one go."""
    if "spec" not in data:
        return {}
    try:
        job_validate(name=name, spec=data["spec"], name_required=False)
    except ValidationError as exc:
        return exc.message_dict
    return {}
