"""The thin layer over the official `stripe` package: one StripeClient per use (its own key, address, timeout and
retries; no global state), one method per Stripe call, errors turned into StripeCallFailed. No domain logic here.

Every write carries the idempotency key its caller derives from the Gryvia invoice, so a retry (by the library
after a lost answer, or by a person after a crash) gets Stripe's stored answer back instead of a second object.
Any answer in live mode is refused.
"""

from __future__ import annotations

import re
from typing import Any

import requests
import stripe

from .config import StripeConfig

SEARCH_PAGE = 10
LIST_PAGE = 100
_KEYLIKE = re.compile(r"\b((?:sk|rk|pk)_(?:test|live))_[A-Za-z0-9*]+")


class StripeCallFailed(Exception):
    """Stripe refused a call, could not be reached in time, or answered something Gryvia cannot use (502).

    Sending again is safe: the calls that were made are answered from Stripe's idempotency records."""


def error_text(exc: stripe.StripeError) -> str:
    """Stripe's own explanation, with the status and code, on one line, without any part of a key (Stripe masks
    keys in its messages; what it leaves is removed too, since this text is stored and shown)."""
    parts = [f"HTTP {exc.http_status}" if exc.http_status else "no answer"]
    if exc.code:
        parts.append(f"({exc.code})")
    message = " ".join(str(exc.user_message or exc).split()) or type(exc).__name__
    return _KEYLIKE.sub(r"\1_…", f"{' '.join(parts)}: {message}")[:300]


def _test_mode(what: str, obj: Any) -> dict[str, Any]:
    """The object as a plain dict, unless it is in live mode (or does not say): refused."""
    plain = obj.to_dict() if isinstance(obj, stripe.StripeObject) else dict(obj)
    if plain.get("livemode") is not False:
        raise StripeCallFailed(f"Stripe answered {what} in live mode (or without saying): refused, test mode only")
    return plain


class StripeGateway:
    """Stripe calls with one client. Use as a context manager (it closes its HTTP session)."""

    def __init__(self, config: StripeConfig) -> None:
        self._session = requests.Session()
        self._session.max_redirects = 0  # Stripe never redirects; a redirect is a misconfigured address
        self.client = stripe.StripeClient(
            config.api_key,
            base_addresses={"api": config.api_base},
            max_network_retries=config.max_retries,
            http_client=stripe.RequestsClient(timeout=config.timeout_s, session=self._session),
        )

    def __enter__(self) -> StripeGateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self._session.close()

    def _call(self, what: str, method: Any, *args: Any) -> dict[str, Any]:
        try:
            answer = method(*args)
        except stripe.StripeError as exc:
            raise StripeCallFailed(f"Stripe could not {what}: {error_text(exc)}") from exc
        return _test_mode(what, answer)

    def _all(self, what: str, method: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Every object of a list, page after page."""
        try:
            return [_test_mode(what, obj) for obj in method(params).auto_paging_iter()]
        except stripe.StripeError as exc:
            raise StripeCallFailed(f"Stripe could not {what}: {error_text(exc)}") from exc

    @staticmethod
    def _key(key: str) -> dict[str, Any]:
        return {"idempotency_key": key}

    # --- customers -----------------------------------------------------------------------------------------------

    def customer_retrieve(self, customer_id: str) -> dict[str, Any] | None:
        """The customer, or None when Stripe has no such customer or it was deleted."""
        try:
            customer = self.client.v1.customers.retrieve(customer_id)
        except stripe.StripeError as exc:
            if isinstance(exc, stripe.InvalidRequestError) and exc.http_status == 404:
                return None
            raise StripeCallFailed(f"Stripe could not read customer {customer_id}: {error_text(exc)}") from exc
        if customer.to_dict().get("deleted"):  # a deleted customer's answer has no livemode
            return None
        return _test_mode("read a customer", customer)

    def customers_with_metadata(self, key: str, value: str) -> list[dict[str, Any]]:
        """Customers whose metadata[key] == value: Stripe's search, or, where the API has no search (a 404: some
        accounts, local fakes), every customer listed and filtered here."""
        query = {"query": f"metadata['{key}']:'{value}'", "limit": SEARCH_PAGE}
        try:
            found = self.client.v1.customers.search(query).data
            customers = [_test_mode("search customers", c) for c in found]
        except stripe.StripeError as exc:
            if not (isinstance(exc, stripe.InvalidRequestError) and exc.http_status == 404):
                raise StripeCallFailed(f"Stripe could not search customers: {error_text(exc)}") from exc
            customers = self._all("list customers", self.client.v1.customers.list, {"limit": LIST_PAGE})
        return [c for c in customers if (c.get("metadata") or {}).get(key) == value]

    def customer_create(self, *, name: str, description: str, metadata: dict[str, str], key: str) -> dict[str, Any]:
        params = {"name": name, "description": description, "metadata": metadata}
        return self._call("create a customer", self.client.v1.customers.create, params, self._key(key))

    def customer_rename(self, customer_id: str, *, name: str, key: str) -> dict[str, Any]:
        return self._call(
            "rename a customer", self.client.v1.customers.update, customer_id, {"name": name}, self._key(key)
        )

    # --- invoices ------------------------------------------------------------------------------------------------

    def invoice_create(
        self,
        *,
        customer: str,
        currency: str,
        description: str,
        days_until_due: int,
        metadata: dict[str, str],
        key: str,
    ) -> dict[str, Any]:
        """A draft that Stripe sends for payment once finalized; it takes only the items created for it."""
        params = {
            "customer": customer,
            "currency": currency,
            "collection_method": "send_invoice",
            "days_until_due": days_until_due,
            "auto_advance": False,
            "pending_invoice_items_behavior": "exclude",
            "description": description,
            "metadata": metadata,
        }
        return self._call("create an invoice", self.client.v1.invoices.create, params, self._key(key))

    def invoice_retrieve(self, invoice_id: str) -> dict[str, Any]:
        return self._call(f"read invoice {invoice_id}", self.client.v1.invoices.retrieve, invoice_id)

    def invoice_find(self, invoice_id: str) -> dict[str, Any] | None:
        """The invoice, or None when Stripe has none with this id (a draft can be deleted in the dashboard)."""
        try:
            invoice = self.client.v1.invoices.retrieve(invoice_id)
        except stripe.StripeError as exc:
            if isinstance(exc, stripe.InvalidRequestError) and exc.http_status == 404:
                return None
            raise StripeCallFailed(f"Stripe could not read invoice {invoice_id}: {error_text(exc)}") from exc
        return _test_mode(f"read invoice {invoice_id}", invoice)

    def invoice_items(self, invoice_id: str) -> list[dict[str, Any]]:
        """The items already on a Stripe invoice (what an interrupted send created)."""
        return self._all(
            "list invoice items", self.client.v1.invoice_items.list, {"invoice": invoice_id, "limit": LIST_PAGE}
        )

    def invoice_item_create(
        self,
        *,
        customer: str,
        invoice: str,
        currency: str,
        amount: int,
        description: str,
        metadata: dict[str, str],
        key: str,
    ) -> dict[str, Any]:
        params = {
            "customer": customer,
            "invoice": invoice,
            "currency": currency,
            "amount": amount,
            "description": description,
            "metadata": metadata,
        }
        return self._call("create an invoice item", self.client.v1.invoice_items.create, params, self._key(key))

    def invoice_finalize(self, invoice_id: str, *, key: str) -> dict[str, Any]:
        return self._call(
            f"finalize invoice {invoice_id}",
            self.client.v1.invoices.finalize_invoice,
            invoice_id,
            {"auto_advance": False},
            self._key(key),
        )
