"""Admin for webhook endpoints and deliveries: saves call the services (audited), the secret is never shown
after creation, deliveries are read-only with a redeliver action."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from apps.core.admin_actions import UnchangedSaveAdminMixin, report_action
from apps.core.admin_filters import FilterSetAdminMixin
from apps.core.errors import Conflict
from apps.tenants.services import admin_principal

from . import services
from .api.filters import WebhookEndpointFilterSet
from .models import Delivery, DeliveryAttempt, WebhookEndpoint


class WebhookEndpointForm(forms.ModelForm):
    class Meta:
        model = WebhookEndpoint
        fields = ("tenant", "url", "events", "enabled", "format", "description", "job_names", "job_labels")

    def clean(self):
        data = super().clean()
        fields = {k: data[k] for k in services.UPDATE_FIELDS if k in data}
        try:
            data.update(services.validate_fields(fields))
        except ValidationError as exc:
            raise forms.ValidationError(exc.message_dict) from exc
        return data


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(UnchangedSaveAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    form = WebhookEndpointForm
    filterset_class = WebhookEndpointFilterSet
    list_display = ("id", "tenant", "url", "format", "enabled", "consecutive_failures", "created_at")
    list_filter = ("enabled", "format", "tenant")
    search_fields = ("url", "description", "tenant__slug")
    readonly_fields = (
        "consecutive_failures",
        "disabled_reason",
        "previous_secret_expires_at",
        "created_by",
        "created_at",
        "updated_at",
    )

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "tenant") if obj else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:
        actor = admin_principal(request)
        fields = {k: form.cleaned_data[k] for k in services.UPDATE_FIELDS if k in form.cleaned_data}
        if change:
            services.endpoint_update(actor=actor, endpoint=obj, **fields)
            return
        created, secret = services.endpoint_create(actor=actor, tenant=form.cleaned_data["tenant"], **fields)
        obj.pk = created.pk
        messages.warning(request, f"The signing secret, shown only now: {secret}")

    def delete_model(self, request, obj) -> None:
        services.endpoint_delete(actor=admin_principal(request), endpoint=obj)

    def delete_queryset(self, request, queryset) -> None:
        for endpoint in queryset:
            services.endpoint_delete(actor=admin_principal(request), endpoint=endpoint)


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    fields = ("number", "status", "status_code", "latency_ms", "error_code", "error", "response_excerpt", "started_at")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "tenant", "endpoint", "event_type", "status", "attempts", "next_attempt_at", "created_at")
    list_filter = ("status", "tenant")
    search_fields = ("message_id", "event__event_id", "endpoint__url", "tenant__slug")
    list_select_related = ("tenant", "endpoint", "event")
    readonly_fields = [f.name for f in Delivery._meta.fields]
    inlines = [DeliveryAttemptInline]
    actions = ["redeliver"]

    @admin.display(description="event")
    def event_type(self, obj: Delivery) -> str:
        return obj.event.type

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Redeliver now (same webhook-id, fresh retry horizon)")
    def redeliver(self, request, queryset) -> None:
        done, refused = [], []
        for delivery in queryset:
            try:
                services.delivery_redeliver(actor=admin_principal(request), delivery=delivery)
                done.append(str(delivery.pk))
            except (Conflict, PermissionError) as exc:
                refused.append(str(exc))
        report_action(self, request, did="Redelivery queued for", noun="delivery(ies)", changed=done, unchanged=refused)
