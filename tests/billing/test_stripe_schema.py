"""The schema documents the 503 (Stripe not configured) and 502 (Stripe failed) of the operations that call Stripe,
so a client, and tests/test_fuzz_api.py, can tell them from server errors."""

import pytest

from tests.tenant_kinds import api_schema


@pytest.mark.parametrize(
    ("path", "method"), [("/api/v1/billing/stripe/webhook/", "post"), ("/api/v1/invoices/{id}/stripe/", "post")]
)
def test_operations_calling_stripe_document_503_and_502(path, method):
    responses = api_schema()["paths"][path][method]["responses"]
    assert "not configured" in responses["503"]["description"]
    assert "Stripe refused" in responses["502"]["description"]
