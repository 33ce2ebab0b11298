"""Input and output of /api/v1/invoices/, /api/v1/cost-centers/ and /api/v1/chargeback/ (strict input).

Money is a decimal string at the currency's minor units (`"12.50"` USD, `"13"` JPY); exact sums from the ledger
(`amount_exact`, `ledger_total`), GPU-hours and rates have 6 places.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import InstantField as _InstantField
from apps.core.api.serializers import StrictModelSerializer, StrictSerializer

from ..choices import InvoiceState
from ..models import CostCenter
from ..services import chargeback
from ..services.invoicing import money_text
from .stripe import StripeStateSerializer

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


@extend_schema_field(OpenApiTypes.STR)
class InstantField(_InstantField):
    """An ISO 8601 date or datetime (UTC unless it has an offset), as in the usage report."""


def _six(**kw: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=20, decimal_places=6, read_only=True, **kw)


@extend_schema_field(OpenApiTypes.STR)
class MoneyField(serializers.Field):
    """An amount at the minor units of the currency of the object it belongs to (`currency`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(read_only=True, **kwargs)

    def get_attribute(self, instance: Any) -> str | None:
        value = super().get_attribute(instance)
        currency = instance["currency"] if isinstance(instance, dict) else instance.currency
        return None if value is None else money_text(value, currency)

    def to_representation(self, value: Any) -> Any:
        return value


class PeriodSerializer(StrictSerializer):
    """A period: `month` (YYYY-MM), or `start` (a date is its UTC midnight) and `end` (a date is included)."""

    month = serializers.CharField(required=False, help_text="YYYY-MM: that UTC month")
    start = InstantField(required=False, help_text="ISO 8601 date or datetime (UTC)")
    end = InstantField(required=False, end_of_day=True, help_text="ISO 8601 date (included) or datetime (exclusive)")

    def __init__(self, *args: Any, require: bool = True, **kwargs: Any) -> None:
        self.require = require
        super().__init__(*args, **kwargs)

    def validate_month(self, value: str) -> tuple[dt.datetime, dt.datetime]:
        match = _MONTH.match(value)
        if not match or not 1 <= int(match[2]) <= 12 or int(match[1]) < 1970:
            raise serializers.ValidationError("must be YYYY-MM, e.g. 2026-09")
        year, month = int(match[1]), int(match[2])
        start = dt.datetime(year, month, 1, tzinfo=dt.UTC)
        end = dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=dt.UTC)
        return start, end

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "month" in attrs:
            if "start" in attrs or "end" in attrs:
                raise serializers.ValidationError({"month": ["give month, or start and end, not both"]})
            attrs["start"], attrs["end"] = attrs.pop("month")
        elif self.require:
            missing = [name for name in ("start", "end") if name not in attrs]
            if missing:
                raise serializers.ValidationError({name: ["is required (or give month)"] for name in missing})
        return attrs


class InvoiceCreateSerializer(PeriodSerializer):
    tenant = serializers.SlugField(max_length=53, help_text="The tenant invoiced (its slug)")
    note = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class EstimateQuerySerializer(PeriodSerializer):
    tenant = serializers.SlugField(required=False, max_length=53)
    format = serializers.ChoiceField(required=False, choices=["json", "csv"])


class InvoiceLineSerializer(serializers.Serializer):
    """One line: the ledger entries of one kind and SKU (tokens: one model) and currency in the period."""

    position = serializers.IntegerField(read_only=True)
    kind = serializers.CharField(read_only=True)
    sku = serializers.CharField(read_only=True)
    model = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    entries = serializers.IntegerField(read_only=True, help_text="Ledger entries (usage records) on this line")
    gpu_hours = _six()
    input_tokens = serializers.IntegerField(read_only=True)
    output_tokens = serializers.IntegerField(read_only=True)
    rate = _six(allow_null=True, help_text="The entries' single rate per GPU-hour, else amount / GPU-hours")
    amount_exact = _six(help_text="The exact sum of the entries' costs")
    amount = MoneyField(help_text="amount_exact rounded half-up to the currency's minor units")
    currency = serializers.CharField(read_only=True)


class InvoiceSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    number = serializers.CharField(read_only=True, allow_null=True, help_text="INV-<tenant>-NNNNNN once finalized")
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    state = serializers.ChoiceField(choices=InvoiceState.choices, read_only=True)
    period_start = serializers.DateTimeField(read_only=True)
    period_end = serializers.DateTimeField(read_only=True, help_text="Exclusive")
    currency = serializers.CharField(read_only=True, help_text="Empty while a draft's usage has several currencies")
    subtotal = MoneyField(help_text="The sum of the rounded line amounts (no tax)")
    lines = InvoiceLineSerializer(many=True, read_only=True)
    ledger_entries = serializers.IntegerField(read_only=True)
    ledger_first_sequence = serializers.IntegerField(read_only=True, allow_null=True)
    ledger_last_sequence = serializers.IntegerField(read_only=True, allow_null=True)
    ledger_head_sequence = serializers.IntegerField(read_only=True, help_text="The chain's head when finalized")
    ledger_head_hash = serializers.CharField(read_only=True)
    ledger_total = _six(help_text="The exact sum of the period's ledger costs")
    note = serializers.CharField(read_only=True)
    computed_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)
    created_by = serializers.CharField(read_only=True)
    finalized_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finalized_by = serializers.CharField(read_only=True)
    paid_at = serializers.DateTimeField(read_only=True, allow_null=True)
    paid_by = serializers.CharField(read_only=True)
    payment_reference = serializers.CharField(read_only=True)
    voided_at = serializers.DateTimeField(read_only=True, allow_null=True)
    voided_by = serializers.CharField(read_only=True)
    void_reason = serializers.CharField(read_only=True)
    stripe = StripeStateSerializer(source="*", read_only=True, help_text="Its Stripe side (test mode)")


class CurrencyTotalSerializer(serializers.Serializer):
    currency = serializers.CharField()
    subtotal = MoneyField()
    ledger_total = _six()


class EstimateSerializer(serializers.Serializer):
    """What an invoice of the period would hold now; `problems` says what would stop finalizing it."""

    tenant = serializers.CharField(source="tenant.slug")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    currency = serializers.CharField(help_text="Empty when the lines are in several currencies")
    subtotal = MoneyField(allow_null=True, help_text="Null when the lines are in several currencies")
    totals = CurrencyTotalSerializer(many=True)
    lines = InvoiceLineSerializer(many=True)
    ledger_entries = serializers.IntegerField()
    ledger_first_sequence = serializers.IntegerField(allow_null=True)
    ledger_last_sequence = serializers.IntegerField(allow_null=True)
    open_records = serializers.IntegerField(source="open_count", help_text="Open usage overlapping the period")
    unledgered_records = serializers.IntegerField(source="unledgered_count")
    problems = serializers.ListField(child=serializers.CharField())


class VoidSerializer(StrictSerializer):
    reason = serializers.CharField(min_length=3, max_length=500, help_text="Why (3 to 500 characters)")


class PaySerializer(StrictSerializer):
    paid_at = serializers.DateTimeField(required=False, default_timezone=dt.UTC, help_text="Default: now")
    reference = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class CostCenterSerializer(StrictModelSerializer):
    """A cost center and the tenants charged to it (slugs; a tenant is in at most one)."""

    tenants = serializers.ListField(child=serializers.SlugField(max_length=53), required=False)
    overhead_percent = serializers.DecimalField(
        max_digits=7, decimal_places=3, min_value=0, max_value=1000, required=False
    )

    class Meta:
        model = CostCenter
        fields = ("code", "name", "overhead_percent", "description", "tenants", "created_at", "updated_at")
        read_only_fields = ("created_at", "updated_at")
        extra_kwargs = {"code": {"validators": []}}  # uniqueness: the service's, with a message naming it

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["code"].read_only = True
        return fields

    def to_representation(self, instance: CostCenter) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["tenants"] = chargeback.cost_center_tenants(instance)
        return data


class ChargebackQuerySerializer(PeriodSerializer):
    source = serializers.ChoiceField(required=False, choices=chargeback.SOURCES, default="invoices")
    format = serializers.ChoiceField(required=False, choices=["json", "csv"])


class TenantChargeSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    invoices = serializers.ListField(child=serializers.CharField(), help_text="Empty for estimates")
    amount = MoneyField()
    overhead = MoneyField()
    total = MoneyField()
    currency = serializers.CharField()


class CostCenterChargeSerializer(serializers.Serializer):
    cost_center = serializers.CharField(help_text="The code; `unassigned` for tenants in no cost center")
    name = serializers.CharField()
    overhead_percent = serializers.DecimalField(max_digits=7, decimal_places=3)
    amount = MoneyField(help_text="The tenants' invoiced amounts")
    overhead = MoneyField()
    total = MoneyField()
    currency = serializers.CharField()
    tenants = TenantChargeSerializer(many=True)


class ChargebackTotalSerializer(serializers.Serializer):
    currency = serializers.CharField()
    invoices = serializers.IntegerField()
    amount = MoneyField(help_text="Equals the sum of the invoices' subtotals")
    overhead = MoneyField()
    total = MoneyField()


class ChargebackReportSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    source = serializers.ChoiceField(choices=chargeback.SOURCES)
    rows = CostCenterChargeSerializer(many=True)
    totals = ChargebackTotalSerializer(many=True)
