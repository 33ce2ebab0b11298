"""What one gateway request holds and what it used (`Ledger`), settled once however the request ends: the
quota reservation adjusted to the usage (the upstream's, else estimated) and, in Redis, the usage row made durable
in the same call; one usage row queued for the meter, and the request's metrics. The relays wait for the settlement
before the answer's last byte, so an answered request's usage outlives its process."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from . import keys, metrics, routes, tokens
from .counters import counters
from .meter import meter
from .quota import Scope
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
    prompt_reserved: int = 0  # the prompt's part of `reserved` (its bound, or its exact count)
    service: str = ""
    upstream: routes.Upstream | None = None
    ttft: float | None = None
    settling: asyncio.Task | None = None

    def record(self) -> dict[str, Any]:
        """The reservation's record (shared_counters.py): enough for the settlement pass to write the request's
        usage row, estimated, if this process dies before it settles."""
        return {
            **self._identity(),
            "input_tokens": self.call.prompt_estimate,
            "reserved": self.reserved,
            "output_allowed": self.reserved - self.prompt_reserved,
        }

    def _identity(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "tenant_id": self.key.tenant_id,
            "key_id": self.key.key_id,
            "key_pk": self.key.pk,
            "model": self.call.model[:100],
            "service": self.service,
            "endpoint": self.call.endpoint,
            "stream": self.call.stream,
            "created_at": self.created_at,
        }

    def settle(self, status: int, usage: Usage, seen_text: str = "", seen_chunks: int = 0) -> asyncio.Task:
        """Settle the reservation and meter the request, once, in a task of its own (a cancelled request still
        settles); a relay that awaits it (shielded) knows the usage is durable."""
        if self.settling is None:
            task = asyncio.get_running_loop().create_task(self._settle(status, usage, seen_text, seen_chunks))
            _background.add(task)
            task.add_done_callback(_background.discard)
            self.settling = task
        return self.settling

    async def _settle(self, status: int, usage: Usage, seen_text: str, seen_chunks: int) -> None:
        call, estimated = self.call, False
        latency = time.monotonic() - self.started
        try:
            if not usage.exact and status in (200, CLIENT_CLOSED):
                estimated = True
                usage = await self._estimate(seen_text, seen_chunks)
        except Exception:
            logger.exception("gateway: estimating the usage of request %s failed", self.request_id)
        row = {
            **self._identity(),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "estimated": estimated,
            "status": status,
            "latency_ms": round(latency * 1000, 3),
            "ttft_ms": None if self.ttft is None else round((self.ttft - self.started) * 1000, 3),
            "scopes": [s.entry() for s in self.scopes],
        }
        try:
            await counters().settle(self.scopes, usage.input_tokens + usage.output_tokens, self.reserved, row)
        except Exception:
            logger.exception("gateway: settling request %s failed", self.request_id)
        meter.record(row)
        tenant, model = self.key.tenant_slug, row["model"]
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
