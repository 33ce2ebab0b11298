"""Admin for the SKU catalog (changes call apps.billing.services), usage records and the ledger (read-only).

Usage records and ledger entries cannot be added, changed or deleted here; the database refuses it as well.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from apps.core.admin_actions import UnchangedSaveAdminMixin
from apps.tenants.services import admin_principal

from .. import services
from ..models import GpuSku, LedgerEntry, UsageRecord

_SKU_SPEC = services.SKU_FIELDS


class GpuSkuAdminForm(forms.ModelForm):
    class Meta:
        model = GpuSku
        fields = ("name", *_SKU_SPEC)

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        candidate = GpuSku(pk=self.instance.pk, name=self.instance.name or data.get("name"))
        for name in _SKU_SPEC:
            setattr(candidate, name, data.get(name))
        try:
            services.sku_validate(candidate)
        except ValidationError as exc:
            for field, messages in getattr(exc, "message_dict", {"__all__": exc.messages}).items():
                self.add_error(field if field in self.fields else None, messages)
        return data


@admin.register(GpuSku)
class GpuSkuAdmin(UnchangedSaveAdminMixin, admin.ModelAdmin):
    """The catalog. Saves and deletes go through apps.billing.services (platform staff only, audited)."""

    form = GpuSkuAdminForm
    list_display = ("name", "gpu_type", "hourly_rate", "currency", "effective_from", "effective_to")
    list_filter = ("gpu_type", "currency")
    search_fields = ("name", "gpu_type", "description")
    readonly_fields = ("created_at", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "name") if obj else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:
        data = form.cleaned_data
        fields = {name: data[name] for name in _SKU_SPEC if name in data}
        actor = admin_principal(request)
        if change:
            services.sku_update(actor=actor, sku=obj, **fields)
        else:
            obj.pk = services.sku_create(actor=actor, name=data["name"], **fields).pk

    def delete_model(self, request, obj) -> None:
        services.sku_delete(actor=admin_principal(request), sku=obj)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


class _ReadOnlyAdmin(admin.ModelAdmin):
    list_select_related = ("tenant",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(UsageRecord)
class UsageRecordAdmin(_ReadOnlyAdmin):
    """Usage is written by metering only (job runs, events, token roll-ups)."""

    list_display = ("name", "tenant", "kind", "job_name", "sku_name", "gpus", "start", "end", "cost", "final")
    list_filter = ("kind", "final", "currency")
    search_fields = ("name", "job_name", "event_id", "tenant__slug")
    date_hierarchy = "start"


@admin.register(LedgerEntry)
class LedgerEntryAdmin(_ReadOnlyAdmin):
    """The hash chain: append-only."""

    list_display = ("tenant_slug", "sequence", "kind", "job", "sku", "start", "end", "cost", "currency", "hash")
    list_filter = ("kind", "currency")
    search_fields = ("tenant_slug", "job", "record_uid", "hash")
