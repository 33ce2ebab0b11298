"""Inference services (`GryviaInferenceService`), model aliases, and the gateway's metered usage.

Spec fields change through `apps.llm.services` only (audited); `status_*` fields are written by the inference
service reconciler. A service with no tenant is shared by the platform: every tenant may call it.
"""

from __future__ import annotations

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from apps.core.models import TimestampedModel
from apps.tenants.models.tenant import DNS_LABEL

from .choices import Runtime, ServicePhase, Task

# What a client puts in `model`: OpenAI-style names such as `llama-3.1-8b-instruct` or `org/model:tag`.
MODEL_NAME = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$",
    "letters, digits and . _ : / - (at most 100, starting with a letter or digit)",
)


class InferenceService(TimestampedModel):
    """A model served behind the gateway: an external OpenAI-compatible URL, or replicas Gryvia runs.

    `model_name` is what clients ask for; several services may publish one name (replicas, versions), and the
    gateway spreads requests by `weight`. `upstream_model` is the name sent upstream (default: `model`).
    `credential_encrypted` holds the upstream's API key, encrypted (apps.core.crypto); it is never shown again.
    """

    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=True
    )
    name = models.CharField(max_length=63, validators=[DNS_LABEL])
    runtime = models.CharField(max_length=30, choices=Runtime.choices)
    task = models.CharField(max_length=20, choices=Task.choices, default=Task.CHAT)
    model = models.CharField(max_length=500, help_text="What the runtime loads (HF id, GGUF, packaged model)")
    model_name = models.CharField(max_length=100, validators=[MODEL_NAME], help_text="The name clients call")
    upstream_model = models.CharField(max_length=500, blank=True, default="")
    version = models.CharField(max_length=50, blank=True, default="")
    weight = models.PositiveIntegerField(default=100, help_text="Share of its model name's traffic")
    url = models.URLField(max_length=500, blank=True, default="", help_text="External runtime: base URL (…/v1)")
    credential_encrypted = models.TextField(blank=True, default="")
    replicas = models.PositiveIntegerField(default=1)
    resources = models.JSONField(default=dict, blank=True, help_text='{"gpus": 1, "cpu": "4", "memory": "16Gi"}')
    args = models.JSONField(default=list, blank=True, help_text="Extra runtime arguments")
    price_input_per_1m = models.DecimalField(
        max_digits=14, decimal_places=6, default=0, validators=[MinValueValidator(0)]
    )
    price_output_per_1m = models.DecimalField(
        max_digits=14, decimal_places=6, default=0, validators=[MinValueValidator(0)]
    )
    context_length = models.PositiveIntegerField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    generation = models.PositiveBigIntegerField(default=1)

    observed_generation = models.PositiveBigIntegerField(default=0)
    status_phase = models.CharField(max_length=20, choices=ServicePhase.choices, default=ServicePhase.PENDING)
    status_message = models.TextField(blank=True, default="")
    status_ready_replicas = models.PositiveIntegerField(default=0)
    status_endpoint = models.CharField(max_length=500, blank=True, default="")
    status_endpoints = models.JSONField(default=list, blank=True, help_text="One base URL per ready replica")
    status_applied = models.JSONField(default=dict, blank=True, help_text="object key -> spec hash last applied")

    AUDIT_FIELDS = (
        "name",
        "runtime",
        "task",
        "model",
        "model_name",
        "upstream_model",
        "version",
        "weight",
        "url",
        "replicas",
        "resources",
        "args",
        "price_input_per_1m",
        "price_output_per_1m",
        "context_length",
        "enabled",
    )

    class Meta:
        ordering = ("model_name", "name")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="inference_service_unique_per_tenant"),
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="inference_service_unique_shared"
            ),
        ]

    def __str__(self) -> str:
        return self.name if self.tenant_id else f"{self.name} (shared)"

    @property
    def shared(self) -> bool:
        return self.tenant_id is None

    @property
    def has_credential(self) -> bool:
        return bool(self.credential_encrypted)


class ModelAlias(TimestampedModel):
    """A model name that stands for others, tried in order: the first that can serve, then the next on failure.

    A tenant's alias is seen by that tenant only; a shared one (no tenant) by all.
    """

    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=True
    )
    name = models.CharField(max_length=100, validators=[MODEL_NAME])
    targets = models.JSONField(default=list, help_text="Model names, in fallback order")

    AUDIT_FIELDS = ("name", "targets")

    class Meta:
        ordering = ("name",)
        verbose_name_plural = "model aliases"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="model_alias_unique_per_tenant"),
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="model_alias_unique_shared"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} -> {', '.join(self.targets)}"


class LlmUsage(models.Model):
    """One gateway request, metered: the tokens in and out (`estimated` when the upstream gave no usage or the
    client hung up), latency and the status returned. Append-only; written in batches off the request path."""

    request_id = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    key_id = models.CharField(max_length=16, db_index=True, help_text="The API key's public id")
    model = models.CharField(max_length=100)
    service = models.CharField(max_length=63, blank=True, default="", help_text="The inference service's name")
    endpoint = models.CharField(max_length=30, help_text="chat.completions, completions or embeddings")
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    estimated = models.BooleanField(default=False)
    stream = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField()
    latency_ms = models.FloatField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True, help_text="Time to the first streamed token")
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = "LLM usage record"
        verbose_name_plural = "LLM usage"
        indexes = [models.Index(fields=["tenant", "created_at"], name="llm_usage_tenant_time_idx")]

    def __str__(self) -> str:
        return f"{self.request_id} {self.model} {self.input_tokens}+{self.output_tokens}"

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class LlmUsageHourly(models.Model):
    """Usage rolled up per tenant, key, model and UTC hour (updated with each metering batch)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    key_id = models.CharField(max_length=16)
    model = models.CharField(max_length=100)
    hour = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    estimated_requests = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("-hour", "model")
        verbose_name = "LLM usage hour"
        verbose_name_plural = "LLM usage (hourly)"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key_id", "model", "hour"], name="llm_usage_hourly_unique")
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.model} {self.requests} requests"
