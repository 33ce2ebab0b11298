"""Serializer fields shared by the apps' query parameters."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import dateparse, timezone
from rest_framework import serializers

_DAY = dt.timedelta(days=1)


class InstantField(serializers.Field):
    """An ISO 8601 date or datetime, in UTC unless it carries an offset. A date is its UTC midnight; with
    `end_of_day`, the midnight after it (so `end=2025-01-31` includes that day)."""

    default_error_messages = {"invalid": "not an ISO 8601 date or datetime (e.g. 2025-01-31 or 2025-01-31T12:00Z)"}

    def __init__(self, *, end_of_day: bool = False, **kwargs: Any) -> None:
        self.end_of_day = end_of_day
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> dt.datetime:
        text = str(data).strip()
        try:
            day = dateparse.parse_date(text)
            moment = None if day else dateparse.parse_datetime(text)
        except ValueError:  # well formed but impossible, e.g. 2025-02-30
            self.fail("invalid")
        if day is not None:
            midnight = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
            return midnight + _DAY if self.end_of_day else midnight
        if moment is None:
            self.fail("invalid")
        if timezone.is_naive(moment):
            return moment.replace(tzinfo=dt.UTC)
        try:
            return moment.astimezone(dt.UTC)
        except OverflowError:  # e.g. 0001-01-01T00:00+01:00, before year 1 in UTC
            self.fail("invalid")

    def to_representation(self, value: dt.datetime) -> str:
        return value.isoformat()
