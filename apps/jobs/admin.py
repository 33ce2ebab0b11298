"""Admin for jobs: submit through services, status read-only, cancel as an action."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from rest_framework import serializers

from apps.core.admin_filters import FilterSetAdminMixin
from apps.tenants.admin import admin_principal

from . import services
from .api.filters import JobFilterSet
from .models import Job, JobEvent
from .selectors import with_queue_positions
from .spec import normalize_spec


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    fields = ("created_at", "type", "reason", "message")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class JobAdminForm(forms.ModelForm):
    spec = forms.JSONField(help_text='The GryviaAIJob spec (upstream field names), e.g. {"type": "training", ...}')

    class Meta:
        model = Job
        fields = ("tenant", "name", "spec")

    def clean(self):
        data = super().clean()
        if self.instance.pk is None:
            try:
                services.validate_name(data.get("name"))
                normalize_spec(data.get("spec"))
            except ValidationError as exc:
                message = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
                raise forms.ValidationError(message) from exc
            except serializers.ValidationError as exc:
                raise forms.ValidationError(f"spec: {exc.detail}") from exc
        return data


@admin.register(Job)
class JobAdmin(FilterSetAdminMixin, admin.ModelAdmin):
    form = JobAdminForm
    filterset_class = JobFilterSet
    list_display = (
        "name",
        "tenant",
        "phase",
        "reason",
        "queue_name",
        "queue_place",
        "current_nodes",
        "gpus_allocated",
        "attempts",
        "created_at",
    )
    list_filter = ("phase", "tenant")
    search_fields = ("name", "tenant__slug", "uid")
    readonly_fields = (
        "uid",
        "generation",
        "observed_generation",
        "submitted_by",
        "phase",
        "reason",
        "message",
        "queue_name",
        "queue_place",
        "priority",
        "request",
        "conditions",
        "start_time",
        "completion_time",
        "attempts",
        "restarts",
        "allocated_nodes",
        "current_nodes",
        "ready_nodes",
        "gpus_allocated",
        "endpoint",
        "last_checkpoint_step",
        "last_checkpoint_at",
        "last_reported_step",
        "node_loss_recoveries",
        "lost_steps",
        "cancel_requested_at",
        "finalized",
        "status_applied",
        "created_at",
    )
    inlines = [JobEventInline]
    actions = ["cancel"]

    def get_queryset(self, request):
        return with_queue_positions(super().get_queryset(request))

    @admin.display(description="position")
    def queue_place(self, obj: Job) -> str:
        """`3 of 7` in its queue while it waits (read now, like the API's status.queuePosition)."""
        return f"{obj.queue_position} of {obj.queue_length}" if obj.queue_position else "-"

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "tenant", "name", "spec") if obj else self.readonly_fields

    def get_fields(self, request, obj=None):
        return ("tenant", "name", "spec") if obj is None else ("tenant", "name", "spec", *self.readonly_fields)

    def save_model(self, request, obj, form, change) -> None:
        if change:
            return  # jobs are immutable once submitted (cancel, resize and delete are the changes)
        created = services.job_create(
            actor=admin_principal(request), tenant=obj.tenant, name=obj.name, spec=form.cleaned_data["spec"]
        )
        obj.pk = created.pk

    def delete_model(self, request, obj) -> None:
        services.job_delete(actor=admin_principal(request), job=obj)

    def delete_queryset(self, request, queryset) -> None:
        for job in queryset:
            services.job_delete(actor=admin_principal(request), job=job)

    @admin.action(description="Cancel (checkpoint request, grace period, then stop)")
    def cancel(self, request, queryset) -> None:
        done = 0
        for job in queryset:
            if not job.is_terminal:
                services.job_cancel(actor=admin_principal(request), job=job)
                done += 1
        messages.success(request, f"cancel requested for {done} job(s)")
