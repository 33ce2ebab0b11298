"""FilterSets shared by the API and the admin."""

import django_filters
from django.db.models import Q
from django.utils import timezone

from ..models import Cohort, PriorityClass, Queue, Reservation


class CohortFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Cohort
        fields = ("name",)


class QueueFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    cohort = django_filters.CharFilter(field_name="cohort__name")

    class Meta:
        model = Queue
        fields = ("name", "cohort")


class PriorityClassFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = PriorityClass
        fields = ("name", "is_default", "preemption_policy")


class ReservationFilterSet(django_filters.FilterSet):
    active = django_filters.BooleanFilter(method="filter_active", label="Active now")

    class Meta:
        model = Reservation
        fields = ("gpu_type", "active")

    def filter_active(self, queryset, name, value):
        now = timezone.now()
        current = Q(start_at__lte=now, end_at__gt=now)
        return queryset.filter(current) if value else queryset.exclude(current)
