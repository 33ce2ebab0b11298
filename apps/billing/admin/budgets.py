"""Admin for budgets (saves and deletes go through apps.billing.services.budgets: validated, audited) and their
threshold events (read-only)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from apps.core.admin_actions import UnchangedSaveAdminMixin
from apps.tenants.services import admin_principal

from ..models import Budget, BudgetEvent
from ..services import budgets


class BudgetAdminForm(forms.ModelForm):
    thresholds = forms.JSONField(initial=[50, 80, 100], help_text="percentages, e.g. [50, 80, 100]")

    class Meta:
        model = Budget
        fields = ("tenant", "cost_center", "name", *budgets.FIELDS)

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        if not self.instance.pk and bool(data.get("tenant")) == bool(data.get("cost_center")):
            self.add_error("cost_center", "a budget is either a tenant's or a cost center's")
        try:
            data.update(budgets.budget_validate({name: data.get(name) for name in budgets.FIELDS}))
        except ValidationError as exc:
            for field, messages in getattr(exc, "message_dict", {"__all__": exc.messages}).items():
                self.add_error(field if field in self.fields else None, messages)
        return data


@admin.register(Budget)
class BudgetAdmin(UnchangedSaveAdminMixin, admin.ModelAdmin):
    """Budgets. Saves and deletes go through apps.billing.services.budgets (permission-checked, audited)."""

    form = BudgetAdminForm
    list_display = ("name", "tenant", "cost_center", "period", "amount", "currency", "hard_limit", "status_state")
    list_filter = ("period", "hard_limit", "status_state", "currency")
    list_select_related = ("tenant", "cost_center")
    search_fields = ("name", "tenant__slug", "cost_center__code")
    readonly_fields = (
        "status_state",
        "status_spent",
        "status_period_start",
        "status_period_end",
        "status_evaluated_at",
        "status_message",
        "created_at",
        "updated_at",
    )

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "tenant", "cost_center", "name") if obj else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:
        data = form.cleaned_data
        fields = {name: data[name] for name in budgets.FIELDS if name in data}
        actor = admin_principal(request)
        if change:
            budgets.budget_update(actor=actor, budget=obj, **fields)
        else:
            created = budgets.budget_create(
                actor=actor, name=data["name"], tenant=data.get("tenant"), cost_center=data.get("cost_center"), **fields
            )
            obj.pk = created.pk

    def delete_model(self, request, obj) -> None:
        budgets.budget_delete(actor=admin_principal(request), budget=obj)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(BudgetEvent)
class BudgetEventAdmin(admin.ModelAdmin):
    """Thresholds crossed: recorded by the evaluator only."""

    list_display = ("budget", "threshold", "period_start", "spent", "amount", "currency", "created_at")
    list_filter = ("threshold", "currency")
    list_select_related = ("budget",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
