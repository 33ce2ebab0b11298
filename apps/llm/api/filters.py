"""FilterSets shared by the API and the admin."""

import django_filters

from ..choices import Runtime, ServicePhase, Task
from ..models import InferenceService, ModelAlias


class InferenceServiceFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    model_name = django_filters.CharFilter()
    runtime = django_filters.ChoiceFilter(choices=Runtime.choices)
    task = django_filters.ChoiceFilter(choices=Task.choices)
    phase = django_filters.ChoiceFilter(field_name="status_phase", choices=ServicePhase.choices)
    shared = django_filters.BooleanFilter(field_name="tenant", lookup_expr="isnull", label="Shared by the platform")

    class Meta:
        model = InferenceService
        fields = ("name", "model_name", "runtime", "task", "phase", "enabled", "shared")


class ModelAliasFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    shared = django_filters.BooleanFilter(field_name="tenant", lookup_expr="isnull", label="Shared by the platform")

    class Meta:
        model = ModelAlias
        fields = ("name", "shared")
