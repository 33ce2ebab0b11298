"""LimitOffset pagination that refuses unordered querysets (NetBox's rule): pages must be stable."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class QuerySetNotOrdered(RuntimeError):
    """A list endpoint tried to paginate a queryset with no ORDER BY."""


class OrderedLimitOffsetPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 1000

    def paginate_queryset(self, queryset, request, view=None):
        if hasattr(queryset, "ordered") and not queryset.ordered:
            raise QuerySetNotOrdered(f"{queryset.model.__name__} list is not ordered; pages would be unstable")
        return super().paginate_queryset(queryset, request, view)
