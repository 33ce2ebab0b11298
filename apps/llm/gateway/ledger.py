"""What one gateway request holds and what it used (`Ledger`), settled once however the request ends: the
quota reservation adjusted to the usage (the upstream's, else estimated), one usage row queued for the meter, and
the request's metrics."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field

from . import keys, metrics, routes, tokens
from .meter import meter
from .quota import Scope, counters
from .request import Call
from .upstream import client, request_headers

logger = logging.getLogger(__name__)
CLIENT_CLOSED = 499  # nginx's code for a client that hung up; recorded in usage rows, never sent
_background: set[asyncio.Task] = set()


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    exact: bool = False  # the upstream reported it


@dataclass
class Ledger:
    """What one request holds and what it used; settled once."""

    key: keys.KeyInfo
    call: Call
    started: float
    created_at: dt.datetime
    request_id: str
    scopes: list[Scope] = field(default_factory=list)
    reserved: int = 0
    service: str = ""
    upstream: routes.Upstream | None = None
    ttft: float | None = None
    settled: bool = False

    def settle(self, status: int, usage: Usage, seen_text: str = "", seen_chunks: int = 0) -> None:
        """Settle the reservation and meter the request (in a task of its own: a cancelled request still does)."""
        if self.settled:
            return
        self.settled = True
        task = asyncio.get_running_loop().create_task(self._settle(status, usage, seen_text, seen_chunks))
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _settle(self, status: int, usage: Usage, seen_text: str, seen_chunks: int) -> None:
        call, estimated = self.call, False
        try:
            if not usage.exact and status in (200, CLIENT_CLOSED):
                estimated = True
                usage = await self._estimate(seen_text, seen_chunks)
            used = usage.input_tokens + usage.output_tokens
            if self.scopes:
                await counters().adjust([s.key for s in self.scopes], [used - self.reserved] * len(self.scopes))
        except Exception:
            logger.exception("gateway: settling request %s failed", self.request_id)
        tenant, model = self.key.tenant_slug, call.model[:100]
        latency = time.monotonic() - self.started
        meter.record(
            {
                "request_id": self.request_id,
                "tenant_id": self.key.tenant_id,
                "key_id": self.key.key_id,
                "key_pk": self.key.pk,
                "model": model,
                "service": self.service,
                "endpoint": call.endpoint,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "estimated": estimated,
                "stream": call.stream,
                "status": status,
                "latency_ms": round(latency * 1000, 3),
                "ttft_ms": None if self.ttft is None else round((self.ttft - self.started) * 1000, 3),
                "created_at": self.created_at,
            }
        )
        metrics.REQUESTS.labels(model, tenant, call.endpoint, str(status)).inc()
        if usage.input_tokens:
            metrics.TOKENS.labels(model, tenant, "input").inc(usage.input_tokens)
        if usage.output_tokens:
            metrics.TOKENS.labels(model, tenant, "output").inc(usage.output_tokens)
        metrics.LATENCY.labels(model, tenant).observe(latency)
        if self.ttft is not None:
            metrics.TTFT.labels(model, tenant).observe(self.ttft - self.started)

    async def _estimate(self, seen_text: str, seen_chunks: int) -> Usage:
        """Usage the upstream did not report: its tokenizer endpoint when it has one, else bytes / 4."""
        call, upstream = self.call, self.upstream
        prompt = tokens.text_of(call.body, call.endpoint)
        input_tokens = output_tokens = None
        if upstream is not None and upstream.tokenize_url:
            headers = request_headers(upstream)
            input_tokens = await tokens.count(client(), upstream.tokenize_url, upstream.upstream_model, prompt, headers)
            if seen_text:
                output_tokens = await tokens.count(
                    client(), upstream.tokenize_url, upstream.upstream_model, seen_text, headers
                )
        if input_tokens is None:
            input_tokens = call.prompt_estimate
        if output_tokens is None:
            output_tokens = max(tokens.by_bytes(seen_text), seen_chunks)
        return Usage(input_tokens, output_tokens)
