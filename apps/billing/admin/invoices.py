"""Admin for invoices (read-mostly: drafts are finalized, marked paid or deleted through actions that call
apps.billing.services.invoicing; nothing is edited in place) and for chargeback's cost centers (saved through
apps.billing.services.chargeback, audited)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from apps.core.admin_actions import UnchangedSaveAdminMixin
from apps.core.errors import Conflict
from apps.tenants.services import admin_principal

from ..choices import InvoiceState
from ..models import CostCenter, Invoice, InvoiceLine, TenantCostCenter
from ..services import chargeback, invoicing


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    fields = ("position", "description", "entries", "gpu_hours", "rate", "amount_exact", "amount", "currency")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


def _run(modeladmin, request, queryset, what: str, call) -> None:
    done = 0
    for invoice in queryset.select_related("tenant"):
        try:
            call(invoice)
            done += 1
        except (Conflict, ValidationError, PermissionError) as exc:
            modeladmin.message_user(request, f"{invoice}: {exc}", messages.ERROR)
    if done:
        modeladmin.message_user(request, f"{done} invoice(s) {what}", messages.SUCCESS)


@admin.action(description="Finalize the selected drafts (checks the period and the ledger)")
def finalize(modeladmin, request, queryset) -> None:
    actor = admin_principal(request)
    _run(modeladmin, request, queryset, "finalized", lambda i: invoicing.invoice_finalize(actor=actor, invoice=i))


@admin.action(description="Mark the selected finalized invoices paid (now)")
def mark_paid(modeladmin, request, queryset) -> None:
    actor = admin_principal(request)
    _run(modeladmin, request, queryset, "marked paid", lambda i: invoicing.invoice_mark_paid(actor=actor, invoice=i))


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    """Invoices are created through the API or the CLI; here they are read, finalized, paid, or (drafts) deleted."""

    list_display = ("__str__", "tenant", "state", "period_start", "period_end", "subtotal", "currency", "finalized_at")
    list_filter = ("state", "currency")
    list_select_related = ("tenant",)
    search_fields = ("number", "tenant__slug")
    date_hierarchy = "period_start"
    inlines = (InvoiceLineInline,)
    actions = (finalize, mark_paid)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return obj is None or obj.state == InvoiceState.DRAFT

    def delete_model(self, request, obj) -> None:
        invoicing.invoice_delete(actor=admin_principal(request), invoice=obj)

    def delete_queryset(self, request, queryset) -> None:
        actor = admin_principal(request)
        _run(self, request, queryset, "deleted", lambda i: invoicing.invoice_delete(actor=actor, invoice=i))


class CostCenterAdminForm(forms.ModelForm):
    tenants = forms.CharField(required=False, help_text="tenant slugs, separated by spaces or commas")

    class Meta:
        model = CostCenter
        fields = ("code", "name", "overhead_percent", "description")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["tenants"].initial = " ".join(chargeback.cost_center_tenants(self.instance))

    def clean_tenants(self) -> list[str]:
        slugs = [slug for slug in self.cleaned_data["tenants"].replace(",", " ").split() if slug]
        try:
            chargeback.cost_center_tenants_check(cost_center=self.instance, slugs=slugs)
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["tenants"]) from exc
        return slugs

    def clean_code(self) -> str:
        code = self.cleaned_data["code"]
        if code == chargeback.UNASSIGNED:
            raise ValidationError(f"{code!r} is reserved for tenants in no cost center")
        return code


class TenantCostCenterInline(admin.TabularInline):
    model = TenantCostCenter
    fields = ("tenant", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(CostCenter)
class CostCenterAdmin(UnchangedSaveAdminMixin, admin.ModelAdmin):
    """Cost centers; saves and deletes go through apps.billing.services.chargeback (platform admins, audited)."""

    form = CostCenterAdminForm
    list_display = ("code", "name", "overhead_percent", "updated_at")
    search_fields = ("code", "name")
    inlines = (TenantCostCenterInline,)

    def get_readonly_fields(self, request, obj=None):
        return ("code",) if obj else ()

    def save_model(self, request, obj, form, change) -> None:
        data = form.cleaned_data
        fields = {name: data[name] for name in chargeback.COST_CENTER_FIELDS if name in data}
        actor = admin_principal(request)
        if change:
            chargeback.cost_center_update(actor=actor, cost_center=obj, tenants=data["tenants"], **fields)
        else:
            obj.pk = chargeback.cost_center_create(actor=actor, code=data["code"], tenants=data["tenants"], **fields).pk

    def save_related(self, request, form, formsets, change) -> None:
        """The tenants are saved by the service; the inline is read-only."""

    def delete_model(self, request, obj) -> None:
        chargeback.cost_center_delete(actor=admin_principal(request), cost_center=obj)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            self.delete_model(request, obj)
