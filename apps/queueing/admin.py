"""Admin for queues, cohorts, priority classes and reservations. Status fields are read-only; changes call services."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.admin_actions import UnchangedSaveAdminMixin
from apps.core.admin_filters import FilterSetAdminMixin
from apps.tenants.services import admin_principal

from . import services
from .api.filters import CohortFilterSet, PriorityClassFilterSet, QueueFilterSet, ReservationFilterSet
from .models import Cohort, GpuNode, PriorityClass, Queue, Reservation


def _form_error(exc: ValidationError) -> forms.ValidationError:
    if hasattr(exc, "error_dict"):
        return forms.ValidationError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
    return forms.ValidationError(exc.messages)


class _ServiceAdmin(UnchangedSaveAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Saves and deletes through `create`/`update`/`delete` services named by `service` (e.g. "cohort")."""

    service = ""
    spec_fields: tuple[str, ...] = ()
    create_fields: tuple[str, ...] = ()

    def _call(self, verb: str, request, **kwargs):
        return getattr(services, f"{self.service}_{verb}")(actor=admin_principal(request), **kwargs)

    def save_model(self, request, obj, form, change) -> None:
        spec = {name: form.cleaned_data[name] for name in self.spec_fields if name in form.cleaned_data}
        if change:
            self._call("update", request, **{self.service: obj}, **spec)
        else:
            extra = {name: form.cleaned_data[name] for name in self.create_fields}
            obj.pk = self._call("create", request, **extra, **spec).pk

    def delete_model(self, request, obj) -> None:
        self._call("delete", request, **{self.service: obj})

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, *self.create_fields) if obj else self.readonly_fields


@admin.register(Cohort)
class CohortAdmin(_ServiceAdmin):
    service = "cohort"
    spec_fields = services.COHORT_FIELDS
    create_fields = ("name",)
    filterset_class = CohortFilterSet
    list_display = ("name", "description", "created_at")
    list_filter = ("created_at",)
    search_fields = ("name", "description")
    readonly_fields = ("created_at", "updated_at")


class QueueAdminForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = ("tenant", "name", "cohort", "weight", "quotas")

    def clean(self):
        data = super().clean()
        tenant = data.get("tenant") or getattr(self.instance, "tenant", None)
        try:
            data["quotas"] = services.validate_quotas(data.get("quotas"))
            if tenant is not None:
                services.check_tenant_ceilings(tenant=tenant, quotas=data["quotas"], exclude_queue_id=self.instance.pk)
        except ValidationError as exc:
            raise _form_error(exc) from exc
        return data


@admin.register(Queue)
class QueueAdmin(_ServiceAdmin):
    form = QueueAdminForm
    service = "queue"
    spec_fields = services.QUEUE_FIELDS
    create_fields = ("tenant", "name")
    filterset_class = QueueFilterSet
    list_display = ("name", "tenant", "cohort", "weight", "status_pending", "status_updated_at", "created_at")
    list_filter = ("tenant", "cohort")
    search_fields = ("name", "tenant__slug", "cohort__name")
    readonly_fields = ("generation", "status_admitted", "status_pending", "status_updated_at", "created_at")


@admin.register(PriorityClass)
class PriorityClassAdmin(_ServiceAdmin):
    service = "priority_class"
    spec_fields = services.PRIORITY_CLASS_FIELDS
    create_fields = ("name",)
    filterset_class = PriorityClassFilterSet
    list_display = ("name", "value", "preemption_policy", "is_default", "created_at")
    list_filter = ("preemption_policy", "is_default")
    search_fields = ("name", "description")
    readonly_fields = ("created_at", "updated_at")


class ReservationAdminForm(forms.ModelForm):
    class Meta:
        model = Reservation
        fields = ("tenant", "gpu_type", "count", "start_at", "end_at", "description")

    def clean(self):
        data = super().clean()
        start, end = data.get("start_at"), data.get("end_at")
        if start and end and end <= start:
            raise forms.ValidationError({"end_at": "must be after start_at"})
        return data


@admin.register(Reservation)
class ReservationAdmin(_ServiceAdmin):
    form = ReservationAdminForm
    service = "reservation"
    spec_fields = services.RESERVATION_FIELDS
    create_fields = ("tenant",)
    filterset_class = ReservationFilterSet
    list_display = ("id", "tenant", "gpu_type", "count", "start_at", "end_at", "status_claimed_gpus", "created_at")
    list_filter = ("gpu_type", "tenant")
    search_fields = ("gpu_type", "tenant__slug", "description")
    readonly_fields = (
        "status_claimed_nodes",
        "status_claimed_gpus",
        "status_message",
        "status_updated_at",
        "created_at",
    )


@admin.register(GpuNode)
class GpuNodeAdmin(admin.ModelAdmin):
    """Read-only: rows are written by `apps.queueing.inventory.sync_gpu_nodes` from the cluster's Node list."""

    list_display = (
        "name",
        "gpu_type",
        "gpu_count",
        "allocatable_gpus",
        "allocated_gpus",
        "healthy",
        "unschedulable",
        "rack",
        "ib_block",
        "rdma",
        "simulated",
        "last_seen_at",
    )
    list_filter = ("gpu_type", "healthy", "unschedulable", "rdma", "mig_capable", "simulated", "rack")
    search_fields = ("name", "gpu_product", "gpu_type", "rack", "ib_block")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
