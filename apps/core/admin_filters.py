"""Lets an admin changelist take the same django-filter FilterSet as the REST API, through its query string.

`/admin/tenants/apikey/?name=ci&revoked=false` filters exactly as `/api/v1/api-keys/?name=ci&revoked=false`.
The FilterSet's parameters are taken out of the request before the admin checks its own lookups (which would
refuse them), and applied to the changelist queryset.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import messages


class FilterSetAdminMixin:
    filterset_class: ClassVar[Any] = None

    def changelist_view(self, request, extra_context=None):
        params = {}
        if self.filterset_class is not None:
            names = set(self.filterset_class.base_filters)
            query = request.GET.copy()
            for name in names & set(query):
                params[name] = query.pop(name)[-1]
            request.GET = query
            request.META["QUERY_STRING"] = query.urlencode()
        request._gryvia_filterset_params = params
        return super().changelist_view(request, extra_context=extra_context)

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        params = getattr(request, "_gryvia_filterset_params", None)
        if not params:
            return queryset
        filterset = self.filterset_class(params, queryset=queryset, request=request)
        if not filterset.is_valid():
            messages.error(request, f"ignored invalid filters: {dict(filterset.errors)}")
            return queryset
        return filterset.qs


__all__ = ["FilterSetAdminMixin"]
