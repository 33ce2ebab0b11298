from django.contrib import admin

from .admin_filters import FilterSetAdminMixin
from .admin_site import brand
from .api.filters import AuditEntryFilterSet
from .models import AuditEntry

brand(admin.site)


@admin.register(AuditEntry)
class AuditEntryAdmin(FilterSetAdminMixin, admin.ModelAdmin):
    """The audit log: read-only."""

    filterset_class = AuditEntryFilterSet
    list_display = ("created_at", "tenant_slug", "actor", "action", "object_type", "object_id")
    list_filter = ("action", "object_type", "tenant_slug")
    search_fields = ("actor", "object_id", "object_repr", "tenant_slug")
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
