"""REST: /api/v1/jobs/ and its actions (cancel, release, resize, events, logs, checkpoints)."""

from __future__ import annotations

from dataclasses import asdict

from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.errors import service_errors
from apps.core.api.renderers import PlainTextRenderer
from apps.core.api.viewsets import TenantScopedViewSet
from apps.core.scopes import JOBS_REPORT

from .. import logs, services
from ..models import Job
from ..selectors import with_queue_positions
from .filters import JobFilterSet
from .serializers import (
    CheckpointReportSerializer,
    CostEstimateSerializer,
    JobEstimateInputSerializer,
    JobEventSerializer,
    JobInputSerializer,
    JobSerializer,
    ResizeSerializer,
)


class JobViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """GryviaAIJobs of the caller's tenant(s), addressed by name. Write as JSON or a YAML manifest."""

    model = Job
    serializer_class = JobSerializer
    filterset_class = JobFilterSet
    scope_family = "jobs"
    # An estimate changes nothing: a viewer may price a job too.
    action_scopes = {"checkpoints": JOBS_REPORT, "estimate": "jobs:read"}
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9-]{1,63}"

    def scope_queryset(self, queryset):
        return with_queue_positions(queryset.select_related("tenant"))

    def read_scope(self) -> str | None:
        return JOBS_REPORT if self.action == "checkpoints" else super().read_scope()

    @extend_schema(request=JobInputSerializer, responses={201: JobSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        body = JobInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with service_errors():
            job = services.job_create(
                actor=self.principal,
                tenant=self.target_tenant(),
                name=body.validated_data["name"],
                spec=body.validated_data["spec"],
            )
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=JobInputSerializer, responses={200: CostEstimateSerializer})
    @action(detail=False, methods=["post"])
    def estimate(self, request: Request, *args, **kwargs) -> Response:
        """What the job would cost if submitted now, and the cheapest GPU type for it; nothing is created."""
        body = JobEstimateInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = self.target_tenant()
        with service_errors():
            estimate = services.job_estimate(spec=body.validated_data["spec"], name=body.validated_data["name"])
        return Response(CostEstimateSerializer({**asdict(estimate), "tenant": tenant.slug}).data)

    def perform_destroy(self, instance: Job) -> None:
        services.job_delete(actor=self.principal, job=instance)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, *args, **kwargs) -> Response:
        with service_errors():
            job = services.job_cancel(actor=self.principal, job=self.get_object())
        return Response(JobSerializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, *args, **kwargs) -> Response:
        """Platform admins: let a waiting job past its tenant's hard budgets (audited); admission then ignores them."""
        with service_errors():
            job = services.job_budget_release(actor=self.principal, job=self.get_object())
        return Response(JobSerializer(job).data)

    @extend_schema(request=ResizeSerializer, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def resize(self, request: Request, *args, **kwargs) -> Response:
        job = self.get_object()
        body = ResizeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with service_errors():
            job = services.job_resize(actor=self.principal, job=job, nodes=body.validated_data["nodes"])
        return Response(JobSerializer(job).data)

    @extend_schema(responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def events(self, request: Request, *args, **kwargs) -> Response:
        queryset = self.get_object().events.order_by("created_at", "id")
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(JobEventSerializer(page, many=True).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("index", int, description="only this node index"),
            OpenApiParameter("tail", int, description="the last N lines of each index"),
            OpenApiParameter("follow", bool, description="stream until the job ends"),
        ],
        responses={(200, "text/plain"): OpenApiTypes.STR},
    )
    @action(detail=True, methods=["get"], renderer_classes=[PlainTextRenderer, JSONRenderer])
    def logs(self, request: Request, *args, **kwargs) -> HttpResponse:
        job = self.get_object()
        index = _int_param(request, "index")
        tail = _int_param(request, "tail")
        if request.query_params.get("follow") in ("1", "true", "yes"):
            response = StreamingHttpResponse(
                logs.follow_job_logs(job, index=index, tail=tail), content_type="text/plain; charset=utf-8"
            )
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"
            return response
        return HttpResponse(logs.job_logs(job, index=index, tail=tail), content_type="text/plain; charset=utf-8")

    @extend_schema(request=CheckpointReportSerializer, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def checkpoints(self, request: Request, *args, **kwargs) -> Response:
        """A trainer reports progress or a committed checkpoint, with its job's own token (scope jobs:report)."""
        job = self.get_object()
        body = CheckpointReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with service_errors():
            job = services.job_report_checkpoint(
                principal=self.principal,
                job=job,
                step=body.validated_data["step"],
                committed=body.validated_data["committed"],
            )
        return Response(JobSerializer(job).data)


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise exceptions.ValidationError({name: ["must be an integer"]}) from exc
    if value < 0:
        raise exceptions.ValidationError({name: ["must be zero or more"]})
    return value
