import django_filters

from ..models import Job


class JobFilterSet(django_filters.FilterSet):
    type = django_filters.CharFilter(field_name="spec__type")
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Job
        fields = ("phase", "type", "name")
