"""REST for Stripe (test mode): the errors of sending an invoice (the action itself is
`POST /api/v1/invoices/{id}/stripe/` in invoices.py) and Stripe's webhook, `POST /api/v1/billing/stripe/webhook/`.

The webhook has no Gryvia credential: Stripe proves itself with `Stripe-Signature`, verified with the endpoint's
signing secret before anything is read from the body.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.parsers import BaseParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.errors import service_errors

from ..services import stripe_sync


class StripeUnavailableError(exceptions.APIException):
    status_code = 503
    default_code = "stripe_unavailable"
    default_detail = "Stripe is not configured"


class StripeFailedError(exceptions.APIException):
    status_code = 502
    default_code = "stripe_failed"
    default_detail = "Stripe refused the call or could not be reached; sending again is safe"


# The answers of the operations that call Stripe besides their 2xx, in the schema so clients (and the fuzzing test)
# know a 503 there means "not configured", not a server error.
STRIPE_RESPONSES = {
    502: OpenApiResponse(description=StripeFailedError.default_detail),
    503: OpenApiResponse(description="Stripe is not configured: no test-mode key (sk_test_) or webhook secret"),
}


@contextmanager
def stripe_errors() -> Iterator[None]:
    """service_errors, plus: Stripe unusable with these settings -> 503, Stripe failed -> 502, a webhook that
    does not verify -> 400."""
    try:
        with service_errors():
            yield
    except stripe_sync.StripeUnavailable as exc:
        raise StripeUnavailableError(str(exc)) from exc
    except stripe_sync.StripeCallFailed as exc:
        raise StripeFailedError(f"{exc}. Sending again is safe: nothing is created twice") from exc
    except stripe_sync.WebhookRefused as exc:
        raise exceptions.ValidationError({"body": [str(exc)]}) from exc


class RawBodyParser(BaseParser):
    """Accepts any body; the view reads the raw bytes (the signature covers them exactly)."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return {}


class StripeStateSerializer(serializers.Serializer):
    """An invoice's Stripe side (empty until it is sent)."""

    customer_id = serializers.CharField(source="stripe_customer_id", read_only=True)
    invoice_id = serializers.CharField(source="stripe_invoice_id", read_only=True)
    status = serializers.CharField(source="stripe_status", read_only=True, help_text="The Stripe invoice's status")
    hosted_url = serializers.CharField(source="stripe_hosted_url", read_only=True, help_text="Where the tenant pays")
    sent_at = serializers.DateTimeField(source="stripe_sent_at", read_only=True, allow_null=True)
    payment_failed_at = serializers.DateTimeField(source="stripe_payment_failed_at", read_only=True, allow_null=True)
    last_error = serializers.CharField(source="stripe_last_error", read_only=True)


class WebhookResultSerializer(serializers.Serializer):
    received = serializers.BooleanField()
    event = serializers.CharField(help_text="The Stripe event id")
    type = serializers.CharField()
    handled = serializers.BooleanField(help_text="False: not an event Gryvia handles, or not a Gryvia invoice")
    duplicate = serializers.BooleanField(help_text="This event was processed before; nothing changed")
    outcome = serializers.CharField()
    invoice = serializers.IntegerField(allow_null=True, help_text="The Gryvia invoice's id")


class StripeWebhookView(APIView):
    """Stripe's webhook: `invoice.paid` marks the Gryvia invoice Paid, `invoice.payment_failed` records the failure;
    each event once. 400 when the signature does not verify or its timestamp is outside the tolerance."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    parser_classes = [RawBodyParser]
    http_method_names = ["post", "options"]

    @extend_schema(
        operation_id="billing_stripe_webhook",
        auth=[],
        request={"application/json": OpenApiTypes.OBJECT},
        parameters=[OpenApiParameter("Stripe-Signature", str, OpenApiParameter.HEADER, required=True)],
        responses={200: WebhookResultSerializer, **STRIPE_RESPONSES},
    )
    def post(self, request: Request) -> Response:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > stripe_sync.webhook.MAX_BODY_BYTES:
            raise exceptions.ValidationError({"body": [f"larger than {stripe_sync.webhook.MAX_BODY_BYTES} bytes"]})
        with stripe_errors():
            result = stripe_sync.stripe_webhook_receive(
                payload=request.body, signature=request.headers.get("Stripe-Signature")
            )
        return Response(WebhookResultSerializer(result.as_dict()).data)
