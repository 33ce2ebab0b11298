"""Stripe on loopback for the Stripe tests: localstripe (a stateful fake Stripe, in this process) and an HTTP-level
fake for the calls localstripe lacks.

- `LocalStripe`: localstripe's aiohttp app in a thread with its own event loop on 127.0.0.1 (a free port). It
  serves customers (create, list, retrieve, update) and keeps no pickle on disk.
- `FakeStripe`: a small real HTTP server (http.server in a thread) answering Stripe-shaped JSON for invoices
  (create, retrieve, finalize) and invoice items (create, list by invoice), which localstripe cannot do for one-off
  invoices. It forwards customer calls to a LocalStripe, answers customer search itself when asked to (localstripe
  has no search), applies Stripe's idempotency rules to every POST (the same key: the stored answer again, marked
  `Idempotent-Replayed`; the same key with other parameters: 400), records every request with its
  Idempotency-Key, and can lose one answer (the work done, the connection closed) or refuse one request.

Also what the test_stripe_* modules share: their marks (`STRIPE_MARKS`), the test-mode API key and webhook
secret the fixtures in conftest.py set, `_finalized` (a finalized invoice of two lines, 9.90 in all) and `_send`
(POST it to Stripe through the API).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import http.client
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from apps.billing.models import Invoice
from apps.billing.services import invoicing
from tests.factories import ACTOR

from .invoice_tools import OCT, SEPT, event, ingest


class LocalStripe:
    """localstripe on 127.0.0.1, started once per test session; `reset()` empties its store."""

    def __init__(self) -> None:
        from aiohttp import web
        from localstripe import resources
        from localstripe.server import app

        self._web, self._app, self.store = web, app, resources.store
        self.store.dump_to_disk = lambda: None  # localstripe pickles its store to /tmp on every write otherwise
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._serve, name="localstripe", daemon=True)
        self.port = 0

    def start(self) -> LocalStripe:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("localstripe did not start")
        return self

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        runner = self._web.AppRunner(self._app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = self._web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            # localstripe schedules a webhook delivery per event (to no one here); cancel what is still waiting.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(runner.cleanup())
            loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def reset(self) -> None:
        self.store.clear()

    def customers(self) -> list[dict[str, Any]]:
        """Every customer localstripe holds, as its API shows them."""
        return [obj._export() for key, obj in list(self.store.items()) if key.startswith("customer:")]


@dataclass
class Seen:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    params: dict[str, Any]
    idempotency_key: str | None
    authorization: str
    replayed: bool = False


def _nest(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Stripe's form encoding (`metadata[k]=v`) back into dicts."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        match = re.fullmatch(r"([^\[]+)\[([^\]]*)\]", key)
        if match:
            out.setdefault(match[1], {})[match[2]] = value
        else:
            out[key] = value
    return out


def _error(status: int, message: str, code: str = "", type_: str = "invalid_request_error") -> tuple[int, dict]:
    return status, {"error": {"type": type_, "message": message, **({"code": code} if code else {})}}


@dataclass
class FakeStripe:
    """The HTTP-level fake (see the module docstring). `upstream`: the LocalStripe customers live in."""

    upstream: LocalStripe
    search: bool = False
    livemode: bool = False
    accept_only: str | None = None  # the one API key it accepts (else 401, with the key masked as Stripe does)
    requests: list[Seen] = field(default_factory=list)
    invoices: dict[str, dict[str, Any]] = field(default_factory=dict)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._idempotency: dict[str, tuple[tuple, int, dict]] = {}
        self._drop: list[tuple[str, re.Pattern]] = []
        self._refuse: list[tuple[str, re.Pattern]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_DELETE(self) -> None:
                fake._handle(self, "DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-stripe", daemon=True
        ).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- what tests arrange and inspect ---------------------------------------------------------------------------

    def lose_answer_once(self, method: str, path: str) -> None:
        """The next matching request is carried out, then the connection closes without an answer (a crash, a
        network cut): the caller cannot know it happened."""
        self._drop.append((method, re.compile(path)))

    def refuse_once(self, method: str, path: str) -> None:
        """The next matching request is refused with 429 before anything is done (Stripe stores no answer then)."""
        self._refuse.append((method, re.compile(path)))

    def posts(self, path: str = "") -> list[Seen]:
        return [r for r in self.requests if r.method == "POST" and re.fullmatch(path or ".*", r.path)]

    def add_item(self, invoice_id: str, amount: int, description: str = "added in the dashboard") -> dict[str, Any]:
        """An item someone else put on a Stripe invoice."""
        invoice = self.invoices[invoice_id]
        with self._lock:
            return self._new_item(invoice, amount=amount, description=description, metadata={})

    # --- serving -------------------------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        params = _nest(parse_qsl(body.decode(), keep_blank_values=True)) if method == "POST" else {}
        query = _nest(parse_qsl(parts.query, keep_blank_values=True))
        key = handler.headers.get("Idempotency-Key")
        seen = Seen(method, parts.path, query, params, key, handler.headers.get("Authorization", ""))
        with self._lock:
            self.requests.append(seen)
            refused = self._take(self._refuse, method, parts.path)
            drop = self._take(self._drop, method, parts.path)
        if refused:
            return self._answer(handler, *_error(429, "Too many requests", "rate_limit"))
        given = seen.authorization.removeprefix("Bearer ")
        if self.accept_only is not None and given != self.accept_only:
            masked = given[:8] + "*" * max(len(given) - 12, 0) + given[-4:]
            return self._answer(
                handler, *_error(401, f"Invalid API Key provided: {masked}", type_="invalid_request_error")
            )
        fingerprint = (method, parts.path, body)
        if method == "POST" and key and key in self._idempotency:
            first, status, answer = self._idempotency[key]
            if first != fingerprint:
                message = f"Keys for idempotent requests can only be used with the same parameters: {key}"
                status, answer = _error(400, message, type_="idempotency_error")
            seen.replayed = True
            return self._answer(handler, status, answer, replayed=True)
        status, answer = self._route(method, parts.path, query, params, body, handler)
        if method == "POST" and key and status < 500 and status != 429:
            self._idempotency[key] = (fingerprint, status, answer)
        if drop:
            handler.close_connection = True
            return None
        return self._answer(handler, status, answer)

    @staticmethod
    def _take(rules: list[tuple[str, re.Pattern]], method: str, path: str) -> bool:
        for rule in rules:
            if rule[0] == method and rule[1].fullmatch(path):
                rules.remove(rule)
                return True
        return False

    def _answer(self, handler: BaseHTTPRequestHandler, status: int, answer: dict, replayed: bool = False) -> None:
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Request-Id", f"req_fake{next(self._ids)}")
        if replayed:
            handler.send_header("Idempotent-Replayed", "true")
        handler.end_headers()
        handler.wfile.write(data)

    def _forward(self, method: str, path: str, body: bytes, handler: BaseHTTPRequestHandler) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.upstream.port, timeout=10)
        headers = {k: handler.headers[k] for k in ("Authorization", "Content-Type") if handler.headers.get(k)}
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            connection.close()

    def _route(self, method: str, path: str, query: dict, params: dict, body: bytes, handler) -> tuple[int, dict]:
        if path == "/v1/customers/search" and self.search:
            return self._search(query, handler)
        if path.startswith("/v1/customers"):
            target = path + (f"?{urlsplit(handler.path).query}" if urlsplit(handler.path).query else "")
            return self._forward(method, target, body, handler)
        with self._lock:
            if method == "POST" and path == "/v1/invoices":
                return self._invoice_create(params, handler)
            match = re.fullmatch(r"/v1/invoices/([\w]+)(/finalize)?", path)
            if match and match[1] in self.invoices:
                invoice = self.invoices[match[1]]
                if match[2] and method == "POST":
                    return self._finalize(invoice, params)
                if not match[2] and method == "GET":
                    return 200, invoice
            elif match:
                return _error(404, f"No such invoice: '{match[1]}'", "resource_missing")
            if method == "POST" and path == "/v1/invoiceitems":
                return self._item_create(params)
            if method == "GET" and path == "/v1/invoiceitems":
                found = [i for i in self.items.values() if i["invoice"] == query.get("invoice")]
                return 200, {"object": "list", "url": path, "has_more": False, "data": found}
        return _error(404, f"Unrecognized request URL ({method}: {path})")

    def _search(self, query: dict, handler) -> tuple[int, dict]:
        match = re.fullmatch(r"metadata\['(\w+)'\]:'([^']*)'", query.get("query", ""))
        if not match:
            return _error(400, "this fake searches metadata['key']:'value' only")
        status, listed = self._forward("GET", "/v1/customers?limit=100", b"", handler)
        found = [c for c in listed.get("data", []) if (c.get("metadata") or {}).get(match[1]) == match[2]]
        return 200, {"object": "search_result", "url": "/v1/customers/search", "has_more": False, "data": found}

    def _customer_exists(self, customer: str, handler) -> bool:
        status, _body = self._forward("GET", f"/v1/customers/{customer}", b"", handler)
        return status == 200

    def _invoice_create(self, params: dict, handler) -> tuple[int, dict]:
        customer = params.get("customer", "")
        if not self._customer_exists(customer, handler):
            return _error(400, f"No such customer: '{customer}'", "resource_missing")
        invoice_id = f"in_fake{next(self._ids):06d}"
        invoice = {
            "id": invoice_id,
            "object": "invoice",
            "livemode": self.livemode,
            "customer": customer,
            "currency": params.get("currency"),
            "collection_method": params.get("collection_method", "charge_automatically"),
            "days_until_due": int(params["days_until_due"]) if "days_until_due" in params else None,
            "auto_advance": params.get("auto_advance") == "true",
            "description": params.get("description"),
            "metadata": params.get("metadata", {}),
            "status": "draft",
            "number": None,
            "total": 0,
            "subtotal": 0,
            "amount_due": 0,
            "hosted_invoice_url": None,
            "attempt_count": 0,
            "created": int(time.time()),
            "status_transitions": {"finalized_at": None, "paid_at": None},
        }
        self.invoices[invoice_id] = invoice
        return 200, invoice

    def _new_item(self, invoice: dict, *, amount: int, description: str, metadata: dict) -> dict[str, Any]:
        item = {
            "id": f"ii_fake{next(self._ids):06d}",
            "object": "invoiceitem",
            "livemode": self.livemode,
            "customer": invoice["customer"],
            "invoice": invoice["id"],
            "currency": invoice["currency"],
            "amount": amount,
            "description": description,
            "metadata": metadata,
            "date": int(time.time()),
        }
        self.items[item["id"]] = item
        for name in ("total", "subtotal", "amount_due"):
            invoice[name] += amount
        return item

    def _item_create(self, params: dict) -> tuple[int, dict]:
        invoice = self.invoices.get(params.get("invoice", ""))
        if invoice is None:
            return _error(404, f"No such invoice: '{params.get('invoice')}'", "resource_missing")
        if invoice["status"] != "draft":
            return _error(400, f"Invoice {invoice['id']} is {invoice['status']}: items go on drafts only")
        if params.get("customer") != invoice["customer"] or params.get("currency") != invoice["currency"]:
            return _error(400, "The item's customer and currency must be the invoice's")
        try:
            amount = int(params["amount"])
        except (KeyError, ValueError):
            return _error(400, "amount: an integer in the currency's smallest unit is required")
        item = self._new_item(
            invoice, amount=amount, description=params.get("description", ""), metadata=params.get("metadata", {})
        )
        return 200, item

    def _finalize(self, invoice: dict, params: dict) -> tuple[int, dict]:
        if invoice["status"] != "draft":
            return _error(400, f"This invoice is already finalized ({invoice['status']})", "invoice_not_editable")
        now = int(time.time())
        invoice["status"] = "paid" if invoice["total"] == 0 else "open"
        invoice["auto_advance"] = params.get("auto_advance") == "true"
        invoice["number"] = f"FAKE-{len([i for i in self.invoices.values() if i['number']]) + 1:04d}"
        invoice["hosted_invoice_url"] = f"https://invoice.stripe.test/i/{invoice['id']}"
        invoice["status_transitions"] = {"finalized_at": now, "paid_at": now if invoice["status"] == "paid" else None}
        return 200, invoice


# --- shared by the test_stripe_* modules ------------------------------------------------------------------------------

KEY = "sk_test_gryvia0123456789"
STRIPE_MARKS = [  # each test_stripe_* module's pytestmark
    pytest.mark.django_db,
    # localstripe registers plain functions as aiohttp handlers, which aiohttp deprecates.
    pytest.mark.filterwarnings("ignore:Bare functions are deprecated:DeprecationWarning"),
]
SECRET = "whsec_gryviatestsecret0123456789"


def _finalized(tenant, start=SEPT, end=OCT) -> Invoice:
    """A finalized invoice of [start, end) with two lines: 2 H100 for 1.5 h (7.50) and 4 L40S for 0.5 h (2.40)."""
    ingest(tenant, event(start + dt.timedelta(days=2), 5400, gpus=2))
    ingest(tenant, event(start + dt.timedelta(days=3), 1800, gpu_type="L40S", gpus=4))
    draft = invoicing.invoice_create(actor=ACTOR, tenant=tenant, start=start, end=end)
    return invoicing.invoice_finalize(actor=ACTOR, invoice=draft)


def _send(client, invoice: Invoice):
    return client.post(f"/api/v1/invoices/{invoice.pk}/stripe/", format="json")
