"""REST: /api/v1/webhooks/ (endpoints), their deliveries, redelivery, ping and secret rotation.

Reading needs `webhooks:read`, every change `webhooks:write`, in the endpoint's tenant; another tenant's
endpoint or delivery is a 404. The secret is in the response of a create and of a rotation, never again.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.errors import service_errors
from apps.core.api.viewsets import TenantScopedViewSet

from .. import selectors, services
from ..models import Delivery, WebhookEndpoint
from .filters import DeliveryFilterSet, WebhookEndpointFilterSet
from .serializers import (
    DeliverySerializer,
    RotateSecretSerializer,
    WebhookEndpointSerializer,
    WebhookEndpointWithSecretSerializer,
)

_DELIVERY = OpenApiParameter("delivery", int, OpenApiParameter.PATH, description="the delivery's id")
_DELIVERY_PATH = r"deliveries/(?P<delivery>[0-9]+)"


def _with_secret(endpoint: WebhookEndpoint, secret: str) -> dict:
    return {**WebhookEndpointSerializer(endpoint).data, "secret": secret}


class WebhookEndpointViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Webhook endpoints of the caller's tenant(s): where events are POSTed, signed (Standard Webhooks)."""

    model = WebhookEndpoint
    serializer_class = WebhookEndpointSerializer
    filterset_class = WebhookEndpointFilterSet
    scope_family = "webhooks"
    lookup_field = "id"
    lookup_value_regex = "[0-9]+"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def scope_queryset(self, queryset):
        return queryset.select_related("tenant")

    @extend_schema(responses={201: WebhookEndpointWithSecretSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with service_errors():
            endpoint, secret = services.endpoint_create(
                actor=self.principal, tenant=self.target_tenant(), **serializer.validated_data
            )
        return Response(_with_secret(endpoint, secret), status=status.HTTP_201_CREATED)

    def perform_update(self, serializer: WebhookEndpointSerializer) -> None:
        with service_errors():
            serializer.instance = services.endpoint_update(
                actor=self.principal, endpoint=serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: WebhookEndpoint) -> None:
        with service_errors():
            services.endpoint_delete(actor=self.principal, endpoint=instance)

    @extend_schema(request=RotateSecretSerializer, responses={200: WebhookEndpointWithSecretSerializer})
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, *args, **kwargs) -> Response:
        """A new secret, shown this once; the old one also signs during the grace window (both signatures sent)."""
        endpoint = self.get_object()
        body = RotateSecretSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        with service_errors():
            endpoint, secret = services.endpoint_rotate_secret(
                actor=self.principal, endpoint=endpoint, grace_seconds=body.validated_data.get("grace_seconds")
            )
        return Response(_with_secret(endpoint, secret))

    @extend_schema(request=None, responses={200: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def ping(self, request: Request, *args, **kwargs) -> Response:
        """Send a `ping` event now; the answer is the delivery with its first attempt."""
        with service_errors():
            delivery = services.endpoint_ping(actor=self.principal, endpoint=self.get_object())
        return Response(DeliverySerializer(delivery).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=["pending", "succeeded", "failed"]),
            OpenApiParameter("type", str, description="the event type, e.g. job.failed"),
        ],
        responses={200: DeliverySerializer(many=True)},
    )
    @action(detail=True, methods=["get"], filterset_class=None)
    def deliveries(self, request: Request, *args, **kwargs) -> Response:
        """The endpoint's deliveries, newest first, each with every attempt."""
        queryset = selectors.deliveries_of(endpoint=self.get_object())
        filtered = DeliveryFilterSet(request.query_params, queryset=queryset, request=request)
        if not filtered.is_valid():
            raise exceptions.ValidationError(filtered.errors)
        page = self.paginate_queryset(filtered.qs)
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)

    @extend_schema(parameters=[_DELIVERY], responses={200: DeliverySerializer})
    @action(detail=True, methods=["get"], url_path=_DELIVERY_PATH, filterset_class=None)
    def delivery(self, request: Request, *args, **kwargs) -> Response:
        return Response(DeliverySerializer(self._delivery()).data)

    @extend_schema(parameters=[_DELIVERY], request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"], url_path=rf"{_DELIVERY_PATH}/redeliver", filterset_class=None)
    def redeliver(self, request: Request, *args, **kwargs) -> Response:
        """Send the delivery again (same `webhook-id`), with a fresh retry horizon; earlier attempts stay."""
        with service_errors():
            services.delivery_redeliver(actor=self.principal, delivery=self._delivery())
        return Response(DeliverySerializer(self._delivery()).data, status=status.HTTP_202_ACCEPTED)

    def _delivery(self) -> Delivery:
        endpoint = self.get_object()
        delivery = selectors.delivery_of(endpoint=endpoint, delivery_id=self.kwargs["delivery"])
        if delivery is None:
            raise exceptions.NotFound(f"webhook {endpoint.pk} has no delivery {self.kwargs['delivery']}")
        return delivery
