"""The one filter definition of the job lists: the REST API's /api/v1/jobs/ and the dashboard's jobs page."""

import django_filters

from .models import Job


class JobFilterSet(django_filters.FilterSet):
    """phase, type, queue (exact) and name (substring): what a job list is narrowed by."""

    type = django_filters.CharFilter(field_name="spec__type")
    name = django_filters.CharFilter(lookup_expr="icontains")
    queue = django_filters.CharFilter(field_name="queue_name")

    class Meta:
        model = Job
        fields = ("phase", "type", "queue", "name")
