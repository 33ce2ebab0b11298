"""Admin for inference services and model aliases (changes call services), and the gateway's usage (read-only).

The upstream credential is write-only here too: a password field that is never filled in, and a box to remove it.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.admin_actions import UnchangedSaveAdminMixin
from apps.core.admin_filters import FilterSetAdminMixin
from apps.tenants.services import admin_principal

from . import services, spec
from .api.filters import InferenceServiceFilterSet, ModelAliasFilterSet
from .choices import Task
from .models import InferenceService, LlmUsage, LlmUsageHourly, ModelAlias

_SPEC = tuple(f for f in InferenceService.AUDIT_FIELDS if f != "name")


def _form_errors(form: forms.Form, exc: ValidationError) -> None:
    """Put a service's field errors on the form's fields (or on the form when it has no such field)."""
    for field, messages in getattr(exc, "message_dict", {"__all__": exc.messages}).items():
        form.add_error(field if field in form.fields else None, messages)


class _SharedOrTenantAdmin(UnchangedSaveAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    @admin.display(description="Tenant", ordering="tenant__slug")
    def owner(self, obj) -> str:
        return obj.tenant.slug if obj.tenant_id else "(shared)"

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "tenant", "name") if obj else self.readonly_fields

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


class InferenceServiceAdminForm(forms.ModelForm):
    credential = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="The upstream's API key: stored encrypted, never shown. Leave empty to keep the current one.",
    )
    remove_credential = forms.BooleanField(required=False, help_text="Remove the stored upstream API key")
    task = forms.ChoiceField(required=False, choices=[("", "(the runtime's default)"), *Task.choices])
    url = forms.CharField(required=False, max_length=500, help_text="External runtime: base URL (…/v1)")
    model_name = forms.CharField(required=False, max_length=100, help_text="The name clients call (default: name)")

    class Meta:
        model = InferenceService
        fields = ("tenant", "name", *_SPEC)

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        fields = {name: data.get(name) for name in ("name", *_SPEC) if name in data}
        if self.instance.pk:
            fields["name"] = self.instance.name
        fields["task"] = data.get("task") or None
        try:
            data.update(services.validate_inference_service(**fields))
            if data.get("credential"):
                spec.clean_credential(data["credential"])
        except ValidationError as exc:
            _form_errors(self, exc)
        return data


@admin.register(InferenceService)
class InferenceServiceAdmin(_SharedOrTenantAdmin):
    """An empty tenant makes a shared service. Saves and deletes go through apps.llm.services."""

    form = InferenceServiceAdminForm
    filterset_class = InferenceServiceFilterSet
    list_display = ("name", "owner", "runtime", "model_name", "status_phase", "status_ready_replicas", "enabled")
    list_filter = ("runtime", "task", "status_phase", "enabled", ("tenant", admin.EmptyFieldListFilter), "tenant")
    search_fields = ("name", "model_name", "model", "tenant__slug")
    list_select_related = ("tenant",)
    readonly_fields = (
        "has_credential",
        "generation",
        "observed_generation",
        "status_phase",
        "status_message",
        "status_ready_replicas",
        "status_endpoint",
        "status_endpoints",
        "created_by",
        "created_at",
        "updated_at",
    )

    @admin.display(boolean=True, description="Has credential")
    def has_credential(self, obj: InferenceService) -> bool:
        return obj.has_credential

    def save_model(self, request, obj, form, change) -> None:
        data = form.cleaned_data
        fields = {name: data[name] for name in _SPEC if name in data}
        if data.get("remove_credential"):
            fields["credential"] = ""
        elif data.get("credential"):
            fields["credential"] = data["credential"]
        actor = admin_principal(request)
        if change:
            services.inference_service_update(actor=actor, service=obj, **fields)
        else:
            created = services.inference_service_create(
                actor=actor, tenant=data.get("tenant"), name=data["name"], **fields
            )
            obj.pk = created.pk

    def delete_model(self, request, obj) -> None:
        services.inference_service_delete(actor=admin_principal(request), service=obj)


class ModelAliasAdminForm(forms.ModelForm):
    class Meta:
        model = ModelAlias
        fields = ("tenant", "name", "targets")

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        name = self.instance.name if self.instance.pk else data.get("name")
        try:
            data["targets"] = services.validate_model_alias(name=name, targets=data.get("targets"))
        except ValidationError as exc:
            _form_errors(self, exc)
        return data


@admin.register(ModelAlias)
class ModelAliasAdmin(_SharedOrTenantAdmin):
    form = ModelAliasAdminForm
    filterset_class = ModelAliasFilterSet
    list_display = ("name", "owner", "targets", "updated_at")
    list_filter = (("tenant", admin.EmptyFieldListFilter), "tenant")
    search_fields = ("name", "tenant__slug")
    list_select_related = ("tenant",)
    readonly_fields = ("created_at", "updated_at")

    def save_model(self, request, obj, form, change) -> None:
        actor, data = admin_principal(request), form.cleaned_data
        if change:
            services.model_alias_update(actor=actor, alias=obj, targets=data["targets"])
        else:
            created = services.model_alias_create(
                actor=actor, tenant=data.get("tenant"), name=data["name"], targets=data["targets"]
            )
            obj.pk = created.pk

    def delete_model(self, request, obj) -> None:
        services.model_alias_delete(actor=admin_principal(request), alias=obj)


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Metered usage is written by the gateway only."""

    list_select_related = ("tenant",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(LlmUsage)
class LlmUsageAdmin(_ReadOnlyAdmin):
    list_display = (
        "created_at",
        "tenant",
        "key_id",
        "model",
        "service",
        "endpoint",
        "input_tokens",
        "output_tokens",
        "estimated",
        "stream",
        "status",
        "latency_ms",
    )
    list_filter = ("endpoint", "estimated", "stream", "status", "tenant", "model")
    search_fields = ("request_id", "key_id", "model", "service", "tenant__slug")
    date_hierarchy = "created_at"


@admin.register(LlmUsageHourly)
class LlmUsageHourlyAdmin(_ReadOnlyAdmin):
    list_display = ("hour", "tenant", "key_id", "model", "requests", "errors", "input_tokens", "output_tokens")
    list_filter = ("tenant", "model")
    search_fields = ("key_id", "model", "tenant__slug")
    date_hierarchy = "hour"
