"""REST: /api/v1/budgets/ (CRUD, by name) and /api/v1/usage/forecast/ (month-end spend per tenant).

Budgets are read with `billing:read` and written with `billing:write` in their tenant (tenant admins, platform
admins); another tenant's budget is a 404. A cost center's budget (`cost_center` set, no tenant) is seen and
written by platform staff only. Platform staff name a tenant with `X-Gryvia-Tenant` to create a tenant's budget.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.errors import service_errors
from apps.core.api.serializers import ManifestSerializerMixin, StrictModelSerializer
from apps.core.api.viewsets import ScopedViewMixin, TenantScopedViewSet
from apps.core.scoping import ALL_TENANTS
from apps.tenants.models import Tenant

from .. import selectors, services
from ..choices import BudgetPeriod
from ..models import Budget, CostCenter
from ..services.budgets import percent_of


class BudgetStatusSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=["ok", "warning", "exceeded", "blocked"])
    spent = serializers.DecimalField(max_digits=20, decimal_places=6)
    percent = serializers.DecimalField(max_digits=12, decimal_places=2)
    period_start = serializers.DateTimeField(allow_null=True)
    period_end = serializers.DateTimeField(allow_null=True)
    evaluated_at = serializers.DateTimeField(allow_null=True)
    crossed = serializers.ListField(child=serializers.IntegerField(), help_text="thresholds crossed this period")
    message = serializers.CharField()


class BudgetSerializer(ManifestSerializerMixin, StrictModelSerializer):
    """A budget; also accepted as a `GryviaBudget` manifest (`metadata.name`, camelCase `spec`)."""

    manifest_kind = "GryviaBudget"
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cost_center = serializers.SlugRelatedField(
        slug_field="code",
        queryset=CostCenter.objects.all(),
        required=False,
        allow_null=True,
        help_text="a cost center's budget (platform admins): its tenants' spend together",
    )
    period = serializers.ChoiceField(choices=BudgetPeriod.choices, required=False)
    start = serializers.DateTimeField(default_timezone=dt.UTC, required=False, allow_null=True)
    end = serializers.DateTimeField(default_timezone=dt.UTC, required=False, allow_null=True)
    amount = serializers.DecimalField(max_digits=20, decimal_places=6)
    currency = serializers.CharField(max_length=3, required=False)
    thresholds = serializers.ListField(
        child=serializers.IntegerField(), required=False, help_text="percentages from 1 to 1000 (default 50, 80, 100)"
    )
    status = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = (
            "name",
            "tenant",
            "cost_center",
            "period",
            "start",
            "end",
            "amount",
            "currency",
            "thresholds",
            "hard_limit",
            "description",
            "status",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")
        # Uniqueness is the service's to check (with a message naming the budget).
        extra_kwargs = {"name": {"validators": []}}

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["name"].read_only = True
            fields["cost_center"].read_only = True
            fields["amount"].required = False
        return fields

    @extend_schema_field(BudgetStatusSerializer)
    def get_status(self, budget: Budget) -> dict[str, Any]:
        crossed = sorted(
            event.threshold for event in budget.events.all() if event.period_start == budget.status_period_start
        )
        return BudgetStatusSerializer(
            {
                "state": budget.status_state,
                "spent": budget.status_spent,
                "percent": percent_of(budget.status_spent, budget.amount),
                "period_start": budget.status_period_start,
                "period_end": budget.status_period_end,
                "evaluated_at": budget.status_evaluated_at,
                "crossed": crossed,
                "message": budget.status_message,
            }
        ).data


class BudgetViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Budgets of the caller's tenant(s), by name: a spending limit per period, thresholds, an optional hard limit
    that holds new jobs whose forecast cost would exceed it."""

    model = Budget
    serializer_class = BudgetSerializer
    scope_family = "billing"
    ordering = ("name", "id")
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9-]{1,63}"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def scope_queryset(self, queryset):
        return queryset.select_related("tenant", "cost_center").prefetch_related("events")

    def filter_queryset(self, queryset):
        queryset = super().filter_queryset(queryset)
        name = self.kwargs.get(self.lookup_field)
        if name is not None and queryset.filter(name=name).count() > 1:  # platform staff, several tenants
            raise exceptions.ValidationError(
                {"tenant": [f"several budgets are named {name!r}: name the tenant with X-Gryvia-Tenant"]}
            )
        return queryset

    def create(self, request: Request, *args, **kwargs) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        name, cost_center = fields.pop("name"), fields.pop("cost_center", None)
        tenant = None if cost_center is not None else self.target_tenant()
        with service_errors():
            budget = services.budget_create(
                actor=self.principal, name=name, tenant=tenant, cost_center=cost_center, **fields
            )
        budget = Budget.all_tenants.select_related("tenant", "cost_center").prefetch_related("events").get(pk=budget.pk)
        return Response(BudgetSerializer(budget).data, status=status.HTTP_201_CREATED)

    def perform_update(self, serializer: BudgetSerializer) -> None:
        with service_errors():
            serializer.instance = services.budget_update(
                actor=self.principal, budget=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: Budget) -> None:
        with service_errors():
            services.budget_delete(actor=self.principal, budget=instance)


class RunForecastSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="the usage record")
    kind = serializers.CharField()
    job = serializers.CharField()
    until = serializers.DateTimeField(help_text="when its extrapolation stops: timeout, window end or month end")
    cost = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="from now until then")


class BudgetForecastSerializer(serializers.Serializer):
    name = serializers.CharField()
    amount = serializers.DecimalField(max_digits=20, decimal_places=6)
    projected_percent = serializers.DecimalField(max_digits=12, decimal_places=2)
    sufficient = serializers.BooleanField()
    hard_limit = serializers.BooleanField()


class TenantForecastSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    currency = serializers.CharField()
    spent = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="this month so far")
    running = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="what runs now adds by month end")
    projected = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="spent + running")
    runs = RunForecastSerializer(many=True)
    budgets = BudgetForecastSerializer(many=True, help_text="the tenant's monthly budgets in this currency")


class ForecastSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    at = serializers.DateTimeField()
    tenants = TenantForecastSerializer(many=True)


class UsageForecastView(ScopedViewMixin, APIView):
    """Month-end spend per tenant: this month's usage so far plus open runs and reservations extrapolated."""

    scope_family = "billing"
    http_method_names = ["get", "head", "options"]

    @extend_schema(operation_id="usage_forecast", responses=ForecastSerializer)
    def get(self, request: Request) -> Response:
        tenants = self.visible_tenants(self.required_scope())
        rows = Tenant.objects.filter(archived_at__isnull=True).order_by("slug")
        if tenants is not ALL_TENANTS:
            rows = rows.filter(pk__in=tenants)
        slug = request.query_params.get("tenant")
        if slug:
            rows = rows.filter(slug=slug)
        forecast = selectors.month_end_forecast(tenants=list(rows), now=timezone.now())
        return Response(ForecastSerializer(forecast).data)
