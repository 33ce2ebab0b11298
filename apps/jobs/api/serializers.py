"""Job input (manifest or flat JSON) and output (manifest-shaped, upstream field names)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from apps.core.api.serializers import API_VERSION

from .. import choices as C
from .. import services
from ..models import Job, JobEvent


class JobInputSerializer(serializers.Serializer):
    """A GryviaAIJob manifest (`apiVersion`, `kind`, `metadata.name`, `spec`) or `{"name", "spec"}`.

    The spec itself is validated by the service (apps.jobs.spec), whose errors name `spec.<field>`.
    """

    name_required = True

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        try:
            name, spec = services.job_document_parse(data, name_required=self.name_required)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return {"name": name, "spec": spec}


class JobSerializer(serializers.ModelSerializer):
    """A job as a manifest: metadata, spec, status."""

    class Meta:
        model = Job
        fields = ("name",)

    def to_representation(self, job: Job) -> dict[str, Any]:
        iso = lambda value: value.isoformat() if value else None  # noqa: E731
        return {
            "apiVersion": API_VERSION,
            "kind": C.KIND,
            "metadata": {
                "name": job.name,
                "tenant": job.tenant.slug,
                "uid": str(job.uid),
                "generation": job.generation,
                "creationTimestamp": iso(job.created_at),
                "submittedBy": job.submitted_by,
            },
            "spec": job.spec,
            "status": {
                "phase": job.phase,
                "reason": job.reason,
                "message": queued_message(job),
                "conditions": job.conditions,
                "startTime": iso(job.start_time),
                "completionTime": iso(job.completion_time),
                "attempts": job.attempts,
                "restarts": job.restarts,
                "allocatedNodes": job.allocated_nodes,
                "currentNodes": job.current_nodes,
                "readyNodes": job.ready_nodes,
                "desiredNodes": job.typed_spec.desired_nodes,
                "gpusAllocated": job.gpus_allocated,
                "gpusSimulated": job.gpus_simulated,
                "queueName": job.queue_name,
                "queuePosition": job.queue_position,
                "queueLength": job.queue_length,
                "admittedBorrowing": job.admitted_borrowing,
                "endpoint": job.endpoint,
                "lastCheckpointStep": job.last_checkpoint_step,
                "lastCheckpointTime": iso(job.last_checkpoint_at),
                "nodeLossRecoveries": job.node_loss_recoveries,
                "lostSteps": job.lost_steps,
                "cancelRequested": job.cancel_requested_at is not None,
                "budgetReleasedAt": iso(job.budget_released_at),
                "observedGeneration": job.observed_generation,
            },
        }


def queued_message(job: Job) -> str:
    """A waiting job's message ends with its position, read now (the stored message says what it waits for)."""
    if job.queue_position is None:
        return job.message
    position = f"position {job.queue_position} of {job.queue_length}"
    return f"{job.message}; {position}" if job.message else position


class JobEventSerializer(serializers.ModelSerializer):
    time = serializers.DateTimeField(source="created_at")

    class Meta:
        model = JobEvent
        fields = ("type", "reason", "message", "time")


class ResizeSerializer(serializers.Serializer):
    nodes = serializers.IntegerField(min_value=1, max_value=1024)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and set(data) - {"nodes"}:
            raise serializers.ValidationError({k: ["unknown field"] for k in sorted(set(data) - {"nodes"})})
        return super().to_internal_value(data)


class CheckpointReportSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0)
    committed = serializers.BooleanField()


class JobEstimateInputSerializer(JobInputSerializer):
    """The document `POST /api/v1/jobs/` takes (a GryviaAIJob manifest or `{"name", "spec"}`); the name may be
    left out."""

    name_required = False


class PricedOptionSerializer(serializers.Serializer):
    gpu_type = serializers.CharField()
    sku = serializers.CharField()
    rate = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="Price per GPU-hour")
    cost = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="The whole job at this type's SKU")
    currency = serializers.CharField()


class CostEstimateSerializer(serializers.Serializer):
    """What a job would cost if submitted now (apps.billing.selectors.CostEstimate)."""

    tenant = serializers.CharField()
    gpus = serializers.IntegerField(help_text="Whole GPUs of the whole gang")
    gpu_type = serializers.CharField(help_text="The GPU type priced: the job's, `any`, or `cpu` for a CPU job")
    cpu_cores = serializers.DecimalField(max_digits=20, decimal_places=3)
    memory_gib = serializers.DecimalField(max_digits=20, decimal_places=3)
    duration_seconds = serializers.IntegerField()
    duration_source = serializers.ChoiceField(
        choices=["timeout", "default"], help_text="timeout: spec.timeout; default: GRYVIA_BILLING_DEFAULT_DURATION_S"
    )
    at = serializers.DateTimeField(help_text="The instant whose prices were used")
    sku = serializers.CharField(allow_null=True, help_text="null: no SKU in force, the job would cost 0")
    rate = serializers.DecimalField(max_digits=20, decimal_places=6)
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    cost = serializers.DecimalField(max_digits=20, decimal_places=6)
    currency = serializers.CharField()
    cheapest = PricedOptionSerializer(
        allow_null=True, help_text="The cheapest GPU type in force for the same GPUs (may be the job's own)"
    )
    alternative = PricedOptionSerializer(allow_null=True, help_text="A job naming a GPU type: the cheapest other type")
    message = serializers.CharField()
