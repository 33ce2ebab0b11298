"""Admin for tenants, memberships and API keys. Status fields are read-only; actions call services."""

from __future__ import annotations

from django.contrib import admin
from django.db import transaction

from apps.core.admin_actions import ActionsOnlyAdminMixin, UnchangedSaveAdminMixin, report_action
from apps.core.admin_filters import FilterSetAdminMixin

from . import services
from .api.filters import ApiKeyFilterSet, TenantFilterSet
from .models import ApiKey, Membership, Tenant
from .services import admin_principal


@admin.register(Tenant)
class TenantAdmin(UnchangedSaveAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    filterset_class = TenantFilterSet
    list_display = ("slug", "display_name", "status_phase", "suspended", "max_gpus", "archived_at", "created_at")
    list_filter = ("status_phase", "suspended", ("archived_at", admin.EmptyFieldListFilter))
    search_fields = ("slug", "display_name")
    readonly_fields = (
        "generation",
        "observed_generation",
        "status_phase",
        "status_message",
        "status_applied",
        "status_reconciled_at",
        "archived_at",
        "created_at",
        "updated_at",
        "members",
    )
    actions = ["archive", "suspend", "resume"]

    @admin.display(description="Members")
    def members(self, obj: Tenant) -> str:
        rows = Membership.all_tenants.filter(tenant=obj).select_related("user").order_by("user__username")
        return ", ".join(f"{m.user.username} ({m.role})" for m in rows) or "none"

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "slug") if obj else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:
        spec = {name: form.cleaned_data[name] for name in services.TENANT_SPEC_FIELDS if name in form.cleaned_data}
        actor = admin_principal(request)
        if change:
            services.tenant_update(actor=actor, tenant=obj, **spec)
        else:
            created = services.tenant_create(actor=actor, slug=form.cleaned_data["slug"], **spec)
            obj.pk = created.pk

    def delete_model(self, request, obj) -> None:
        services.tenant_archive(actor=admin_principal(request), tenant=obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # tenants are archived (action), never deleted

    @admin.action(description="Archive (remove cluster objects, revoke keys, keep history)")
    def archive(self, request, queryset) -> None:
        changed, unchanged = [], []
        for tenant in queryset:
            if tenant.is_archived:
                unchanged.append(f"tenant {tenant.slug} is already archived")
                continue
            services.tenant_archive(actor=admin_principal(request), tenant=tenant)
            changed.append(tenant.slug)
        report_action(self, request, did="Archived", noun="tenant(s)", changed=changed, unchanged=unchanged)

    def _set_suspended(self, request, queryset, *, suspended: bool) -> None:
        state, changed, unchanged = ("suspended" if suspended else "active"), [], []
        for tenant in queryset:
            if tenant.suspended == suspended:
                unchanged.append(f"tenant {tenant.slug} is already {state}")
            else:
                services.tenant_update(actor=admin_principal(request), tenant=tenant, suspended=suspended)
                changed.append(tenant.slug)
        did = "Suspended" if suspended else "Resumed"
        report_action(self, request, did=did, noun="tenant(s)", changed=changed, unchanged=unchanged)

    @admin.action(description="Suspend (reads only)")
    def suspend(self, request, queryset) -> None:
        self._set_suspended(request, queryset, suspended=True)

    @admin.action(description="Resume")
    def resume(self, request, queryset) -> None:
        self._set_suspended(request, queryset, suspended=False)


@admin.register(Membership)
class MembershipAdmin(UnchangedSaveAdminMixin, admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "cluster_identity", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__slug", "cluster_identity")
    autocomplete_fields = ("user",)

    def save_model(self, request, obj, form, change) -> None:
        actor = admin_principal(request)
        if change:
            services.membership_update(
                actor=actor, membership=obj, role=obj.role, cluster_identity=obj.cluster_identity
            )
        else:
            created = services.membership_add(
                actor=actor, tenant=obj.tenant, user=obj.user, role=obj.role, cluster_identity=obj.cluster_identity
            )
            obj.pk = created.pk

    def delete_model(self, request, obj) -> None:
        services.membership_remove(actor=admin_principal(request), membership=obj)

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            for membership in queryset:
                services.membership_remove(actor=admin_principal(request), membership=membership)


@admin.register(ApiKey)
class ApiKeyAdmin(ActionsOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Keys are created with `create_api_key` or the API (the plaintext must be shown once, to its owner); here
    they are read and revoked."""

    filterset_class = ApiKeyFilterSet
    list_display = (
        "key_id",
        "name",
        "tenant",
        "scope_list",
        "is_platform",
        "state",
        "expires_at",
        "last_used_at",
        "created_at",
    )
    list_filter = ("is_platform", "tenant", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("key_id", "name", "tenant__slug")
    fields = (
        "key_id",
        "name",
        "tenant",
        "scopes",
        "is_platform",
        "expires_at",
        "revoked_at",
        "last_used_at",
        "previous_valid_until",
        "created_by",
        "created_at",
    )
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="scopes")
    def scope_list(self, obj: ApiKey) -> str:
        return ", ".join(obj.scopes) or "-"

    @admin.action(description="Revoke", permissions=["operate"])
    def revoke(self, request, queryset) -> None:
        changed, unchanged = [], []
        for key in queryset:
            if key.revoked_at is not None:
                unchanged.append(f"key {key.key_id} is already revoked")
                continue
            services.api_key_revoke(actor=admin_principal(request), key=key)
            changed.append(key.key_id)
        report_action(self, request, did="Revoked", noun="key(s)", changed=changed, unchanged=unchanged)
