"""FilterSets of core objects, shared by the API and the admin."""

import datetime as dt

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField

from apps.core.models import AuditEntry


class InstantFormField(IsoDateTimeField):
    """An ISO 8601 datetime, as the same instant in UTC: PostgreSQL refuses offsets past ±15:59, which ISO allows."""

    def to_python(self, value):
        moment = super().to_python(value)
        try:
            return moment.astimezone(dt.UTC) if moment is not None else None
        except OverflowError as exc:  # e.g. 0001-01-01T00:00+01:00, before year 1 in UTC
            raise forms.ValidationError("out of the range of dates", code="invalid") from exc


class InstantFilter(django_filters.IsoDateTimeFilter):
    field_class = InstantFormField


class AuditEntryFilterSet(django_filters.FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant_slug")
    since = InstantFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = AuditEntry
        fields = ("action", "object_type", "object_id", "actor", "tenant", "since")
