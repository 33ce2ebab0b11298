"""The GryviaAIJob spec: parsing durations, validating user input, and the derived sizes every layer uses.

Field names are upstream's (camelCase). `normalize_spec` returns the stored form (defaults filled in, env as a
list of {name, value}); `JobSpec.of(stored)` gives typed access to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rest_framework import serializers

from apps.core.api.serializers import StrictSerializer

from . import choices as C

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def parse_duration(value: str) -> int:
    """Seconds in `3s`, `90m`, `24h`, `1d12h`, `1h30m15s` (units in that order, at least one, total > 0)."""
    match = _DURATION.match(value.strip()) if isinstance(value, str) else None
    if not value or match is None or not any(match.groups()):
        raise ValueError(f"{value!r} is not a duration such as 3s, 90m or 1d12h")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{value!r} must be longer than zero")
    return total


def _quantity(value: str) -> str:
    if not isinstance(value, str) or not _QUANTITY.match(value):
        raise serializers.ValidationError(f"{value!r} is not a Kubernetes quantity such as 2, 500m or 8Gi")
    return value


class _Camel(StrictSerializer):
    """Rejects unknown keys, naming them with the errors of the known ones (every error of a spec in one answer)."""


class ElasticSerializer(_Camel):
    minNodes = serializers.IntegerField(min_value=1)
    desiredNodes = serializers.IntegerField(min_value=1, required=False, allow_null=True)


class DistributedSerializer(_Camel):
    enabled = serializers.BooleanField(default=False)
    nodes = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    gpusPerNode = serializers.IntegerField(min_value=0, max_value=64, required=False, allow_null=True)
    procsPerNode = serializers.IntegerField(min_value=1, max_value=128, required=False, allow_null=True)
    backend = serializers.ChoiceField(choices=C.BACKENDS, required=False, allow_blank=True)
    elastic = ElasticSerializer(required=False, allow_null=True)


class ResourcesSerializer(_Camel):
    cpu = serializers.CharField(required=False, validators=[_quantity])
    memory = serializers.CharField(required=False, validators=[_quantity])


class CheckpointSerializer(_Camel):
    dir = serializers.CharField(default=C.DEFAULT_CHECKPOINT_DIR, max_length=500)
    interval = serializers.IntegerField(min_value=1, required=False, allow_null=True, help_text="steps")
    preStopGraceSeconds = serializers.IntegerField(min_value=5, max_value=3600, default=C.DEFAULT_CHECKPOINT_GRACE_S)

    def validate_dir(self, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise serializers.ValidationError("must be an absolute path without '..'")
        return value


class PlacementSerializer(_Camel):
    strategy = serializers.ChoiceField(choices=("pack", "spread"), default="pack")
    sameTopology = serializers.ChoiceField(
        choices=("rack", "ibBlock"), required=False, help_text="keep the gang in one"
    )
    rdma = serializers.BooleanField(default=False, help_text="only nodes with RDMA")


class TolerationSerializer(_Camel):
    key = serializers.CharField(required=False, max_length=253)
    operator = serializers.ChoiceField(choices=("Exists", "Equal"), required=False)
    value = serializers.CharField(required=False, max_length=63, allow_blank=True)
    effect = serializers.ChoiceField(choices=("NoSchedule", "PreferNoSchedule", "NoExecute"), required=False)
    tolerationSeconds = serializers.IntegerField(required=False, min_value=0)


class EnvField(serializers.Field):
    """`env` as a list of {name, value} (Kubernetes style) or a mapping; stored as the list."""

    def to_internal_value(self, data: Any) -> list[dict[str, str]]:
        if isinstance(data, dict):
            data = [{"name": k, "value": v} for k, v in data.items()]
        if not isinstance(data, list):
            raise serializers.ValidationError("must be a list of {name, value} or a mapping")
        out, seen = [], set()
        for item in data:
            if not isinstance(item, dict) or set(item) - {"name", "value"} or "name" not in item:
                raise serializers.ValidationError("each entry must be {name, value}")
            name, value = item["name"], item.get("value", "")
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise serializers.ValidationError(f"{name!r} is not a valid variable name")
            if name in C.RESERVED_ENV or name.startswith(C.RESERVED_ENV_PREFIXES):
                raise serializers.ValidationError(f"{name} is set by Gryvia and cannot be overridden")
            if name in seen:
                raise serializers.ValidationError(f"{name} is given twice")
            if not isinstance(value, str | int | float | bool):
                raise serializers.ValidationError(f"value of {name} must be a string")
            seen.add(name)
            out.append({"name": name, "value": str(value)})
        return out

    def to_representation(self, value: Any) -> Any:
        return value


class JobSpecSerializer(_Camel):
    """Validates a GryviaAIJob spec with upstream field names; errors name the field."""

    type = serializers.ChoiceField(choices=C.JOB_TYPES)
    image = serializers.CharField(max_length=500)
    command = serializers.ListField(child=serializers.CharField(max_length=10000), required=False, max_length=256)
    args = serializers.ListField(child=serializers.CharField(max_length=10000), required=False, max_length=1024)
    env = EnvField(required=False)
    workingDir = serializers.CharField(required=False, max_length=500)
    gpus = serializers.IntegerField(min_value=0, max_value=64, default=0)
    gpuFraction = serializers.FloatField(
        required=False, allow_null=True, help_text="KAI mode: a share of one GPU per pod, between 0 and 1"
    )
    gpuType = serializers.CharField(required=False, allow_blank=True, max_length=63)
    resources = ResourcesSerializer(required=False)
    distributed = DistributedSerializer(required=False)
    retryLimit = serializers.IntegerField(min_value=0, max_value=100, default=0)
    timeout = serializers.CharField(required=False, allow_blank=True, max_length=32)
    priority = serializers.IntegerField(min_value=0, max_value=100, default=0)
    priorityClassName = serializers.RegexField(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", required=False, max_length=63)
    queueName = serializers.CharField(required=False, allow_blank=True, max_length=63)
    storage = serializers.CharField(required=False, allow_blank=True, max_length=253)
    storageRequest = serializers.CharField(required=False, validators=[_quantity])
    checkpoint = CheckpointSerializer(required=False)
    nodeSelector = serializers.DictField(child=serializers.CharField(max_length=63), required=False)
    tolerations = serializers.ListField(child=TolerationSerializer(), required=False, max_length=32)
    ttlSecondsAfterFinished = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    placement = PlacementSerializer(required=False)
    port = serializers.IntegerField(min_value=1, max_value=65535, required=False, help_text="inference: HTTP port")

    def validate_timeout(self, value: str) -> str:
        if value:
            try:
                parse_duration(value)
            except ValueError as exc:
                raise serializers.ValidationError(str(exc)) from exc
        return value

    def validate_gpuFraction(self, value: float | None) -> float | None:  # noqa: N802 - upstream field name
        if value is None:
            return value
        if settings.GRYVIA_ADMISSION != "kai":
            raise serializers.ValidationError(
                "a fraction of a GPU needs the KAI scheduler (GRYVIA_ADMISSION=kai), and this installation admits "
                f"jobs with {settings.GRYVIA_ADMISSION!r}: ask for whole GPUs with gpus"
            )
        if not 0 < value < 1:
            raise serializers.ValidationError(
                f"must be between 0 and 1, exclusive (the share of one GPU per pod), got {value:g}; "
                "ask for whole GPUs with gpus"
            )
        return value

    def validate_gpuType(self, value: str) -> str:  # noqa: N802 - upstream field name
        if value and not _LABEL_VALUE.match(value):
            raise serializers.ValidationError(f"{value!r} is not a valid label value")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        dist = attrs.get("distributed") or {}
        elastic = dist.get("elastic")
        errors: dict[str, str] = {}
        if elastic:
            if attrs["type"] == "inference":
                errors["distributed.elastic"] = "inference jobs cannot be elastic"
            elif not dist.get("enabled"):
                errors["distributed.elastic"] = "needs distributed.enabled: true"
            elif elastic["minNodes"] > dist.get("nodes", 1):
                errors["distributed.elastic.minNodes"] = "must be at most distributed.nodes"
            elif elastic.get("desiredNodes") and not elastic["minNodes"] <= elastic["desiredNodes"] <= dist["nodes"]:
                errors["distributed.elastic.desiredNodes"] = "must be between minNodes and distributed.nodes"
        if attrs["type"] != "inference" and attrs.get("port"):
            errors["port"] = "only inference jobs serve a port"
        if attrs.get("gpuFraction") is not None:
            fraction_error = _gpu_fraction_conflict(attrs)
            if fraction_error:
                errors["gpuFraction"] = fraction_error
        if not attrs.get("command") and not attrs.get("args"):
            pass  # the image's entrypoint runs
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def _gpu_fraction_conflict(attrs: dict[str, Any]) -> str | None:
    """Why `gpuFraction` cannot go with the rest of the spec, or None."""
    dist = attrs.get("distributed") or {}
    if attrs.get("gpus"):
        return f"cannot go with gpus: {attrs['gpus']}; a pod asks for whole GPUs or a share of one, not both"
    if dist.get("enabled") and dist.get("gpusPerNode"):
        return (
            f"cannot go with distributed.gpusPerNode: {dist['gpusPerNode']}; a pod asks for whole GPUs or a share "
            "of one, not both"
        )
    if dist.get("enabled") and attrs["type"] != "inference":
        # Two ranks of one job may be given shares of the same GPU, and NCCL refuses two ranks on one device.
        return "only single-pod jobs and inference replicas can share a GPU, not distributed ranks: use gpus"
    return None


def normalize_spec(data: Any) -> dict[str, Any]:
    """Validate and fill in defaults. Raises serializers.ValidationError naming each bad field."""
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = _plain(serializer.validated_data)
    dist = spec.setdefault("distributed", {"enabled": False, "nodes": 1})
    if not dist.get("enabled"):
        dist.update({"enabled": False, "nodes": 1})
        dist.pop("elastic", None)
    spec.setdefault("env", [])
    if spec.get("storage") and not spec.get("storageRequest"):
        spec["storageRequest"] = C.DEFAULT_STORAGE_REQUEST
    return spec


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class JobSpec:
    """Typed, derived view of a stored (normalized) spec."""

    raw: dict[str, Any]

    @classmethod
    def of(cls, raw: dict[str, Any]) -> JobSpec:
        return cls(raw)

    @property
    def type(self) -> str:
        return self.raw["type"]

    @property
    def distributed(self) -> dict[str, Any]:
        return self.raw.get("distributed") or {"enabled": False, "nodes": 1}

    @property
    def is_distributed(self) -> bool:
        return bool(self.distributed.get("enabled"))

    @property
    def elastic(self) -> dict[str, Any] | None:
        return self.distributed.get("elastic") if self.is_distributed else None

    @property
    def max_nodes(self) -> int:
        """Upper bound of pods: `distributed.nodes` (1 when not distributed)."""
        return int(self.distributed.get("nodes") or 1) if self.is_distributed else 1

    @property
    def min_nodes(self) -> int:
        return int(self.elastic["minNodes"]) if self.elastic else self.max_nodes

    @property
    def desired_nodes(self) -> int:
        """Pods wanted now: an elastic job's desiredNodes (clamped), else every node."""
        if not self.elastic:
            return self.max_nodes
        desired = self.elastic.get("desiredNodes") or self.max_nodes
        return max(self.min_nodes, min(desired, self.max_nodes))

    @property
    def gpu_fraction(self) -> float | None:
        """KAI mode: the share of one GPU each pod asks for (0 < f < 1); None when the job asks for whole GPUs."""
        value = self.raw.get("gpuFraction")
        return None if value is None else float(value)

    @property
    def gpus_per_pod(self) -> int:
        """Whole GPUs per pod (`nvidia.com/gpu`); 0 for a job asking for a fraction of one."""
        if self.gpu_fraction is not None:
            return 0
        if not self.is_distributed:
            return int(self.raw.get("gpus") or 0)
        per = self.distributed.get("gpusPerNode")
        if per is not None:
            return int(per)
        return int(self.raw.get("gpus") or 0)

    @property
    def procs_per_node(self) -> int:
        explicit = self.distributed.get("procsPerNode")
        if explicit:
            return int(explicit)
        return self.gpus_per_pod or 1

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the job holds: what Gryvia's admission, placement and `gpusAllocated` count. A job with
        `gpuFraction` holds none; its shares are KAI's to count (see `total_gpu_share`)."""
        return self.gpus_per_pod * self.desired_nodes

    @property
    def gpu_share_per_pod(self) -> float:
        """GPUs per pod, a fraction included: `gpuFraction`, else the whole GPUs per pod."""
        return self.gpu_fraction if self.gpu_fraction is not None else float(self.gpus_per_pod)

    @property
    def total_gpu_share(self) -> float:
        """GPUs the job uses, fractions included (0.5 per pod x 2 replicas = 1.0): what KAI counts against the
        job's KAI queue's `gpu` quota."""
        return self.gpu_share_per_pod * self.desired_nodes

    @property
    def uses_gpu(self) -> bool:
        """Whole GPUs or a share of one."""
        return self.gpu_share_per_pod > 0

    @property
    def timeout_seconds(self) -> int | None:
        timeout = self.raw.get("timeout")
        return parse_duration(timeout) if timeout else None

    @property
    def workload_kind(self) -> str:
        return "StatefulSet" if self.type == "inference" else "Job"

    @property
    def checkpoint(self) -> dict[str, Any] | None:
        return self.raw.get("checkpoint")
