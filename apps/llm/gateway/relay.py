"""Relaying the upstream's answer to the client: a whole JSON reply, a server-sent event stream (the usage chunk
only when the client asked for it), or the upstream's error in OpenAI's envelope; each settles the request's ledger
with the usage it saw. An answer's settlement is awaited before its body (or its stream's last event) is sent: a
client that has the whole answer has its usage durable (shared_counters.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from django.http import HttpResponse, StreamingHttpResponse

from . import metrics
from .errors import GatewayError, envelope, error_response
from .ledger import CLIENT_CLOSED, Ledger, Usage
from .upstream import read_body, timeout_error

DONE = b"data: [DONE]"


def relay_error(ledger: Ledger, response: httpx.Response) -> HttpResponse:
    """An upstream's error, in OpenAI's envelope (its own when it sent one)."""
    status = response.status_code
    ledger.settle(status, Usage())
    try:
        data = json.loads(response.content)
        if isinstance(data, dict) and isinstance(data.get("error"), dict) and data["error"].get("message"):
            return HttpResponse(response.content, status=status, content_type="application/json")
        message = json.dumps(data)[:500]
    except ValueError:
        message = response.content[:500].decode(errors="replace")
    text = f"upstream {ledger.service} answered {status}: {message}"
    return error_response(status if status >= 400 else 502, text, code="upstream_error")


def _usage_of(data: Any) -> Usage | None:
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens")
    output = usage.get("completion_tokens")
    if output is None and isinstance(usage.get("total_tokens"), int) and isinstance(prompt, int):
        output = usage["total_tokens"] - prompt
    if not isinstance(prompt, int):
        return None
    return Usage(prompt, output if isinstance(output, int) else 0, exact=True)


def _output_text(data: Any) -> str:
    parts = []
    for choice in data.get("choices") or [] if isinstance(data, dict) else []:
        if isinstance(choice, dict):
            message = choice.get("message") or {}
            text = choice.get("text") if "text" in choice else message.get("content")
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


async def relay_whole(ledger: Ledger, response: httpx.Response) -> HttpResponse:
    upstream = ledger.upstream
    assert upstream is not None
    content = await read_body(response, upstream)
    status = response.status_code
    if status >= 400:
        return relay_error(ledger, response)
    try:
        data = json.loads(content)
    except ValueError:
        ledger.settle(502, Usage())
        raise GatewayError(
            502, f"upstream {upstream.service} sent a reply that is not JSON", code="bad_gateway"
        ) from None
    usage = _usage_of(data)
    if usage is not None:
        await asyncio.shield(ledger.settle(status, usage))
    else:
        await asyncio.shield(ledger.settle(status, Usage(), seen_text=_output_text(data)))
    reply = HttpResponse(content, status=status, content_type="application/json")
    reply["X-Request-Id"] = ledger.request_id
    return reply


def relay_stream(ledger: Ledger, response: httpx.Response) -> StreamingHttpResponse:
    out = StreamingHttpResponse(_relay(ledger, response), content_type="text/event-stream")
    out["Cache-Control"] = "no-cache"
    out["X-Accel-Buffering"] = "no"
    out["X-Request-Id"] = ledger.request_id
    return out


async def _relay(ledger: Ledger, response: httpx.Response) -> AsyncIterator[bytes]:
    """The upstream's server-sent events, relayed as they arrive; the usage chunk only when the client asked."""
    call, upstream = ledger.call, ledger.upstream
    assert upstream is not None
    usage: Usage | None = None
    seen: list[str] = []
    chunks, status, buffer = 0, CLIENT_CLOSED, b""
    try:
        async for piece in response.aiter_raw():
            buffer += piece
            if b"\n\n" not in buffer and b"\r\n\r\n" not in buffer:
                continue
            buffer = buffer.replace(b"\r\n", b"\n")
            *events, buffer = buffer.split(b"\n\n")
            out, done = [], False
            for event in events:
                kept, found = _event(event, call.wants_usage, seen)
                if found is not None:
                    usage = found
                elif kept is not None and kept.startswith(b"data: {"):
                    chunks += 1
                if kept is not None:
                    out.append(kept + b"\n\n")
                    done = kept == DONE
            if out:
                if ledger.ttft is None:
                    ledger.ttft = time.monotonic()
                if done:  # a client that hangs up after [DONE] (as clients do) got the whole answer: settle first
                    status = 200
                    await asyncio.shield(_finish(ledger, status, usage, seen, chunks))
                yield b"".join(out)
            if done:
                break  # some servers keep the connection a while after [DONE]; nothing after it counts
        if buffer.strip():
            kept, found = _event(buffer.strip(), call.wants_usage, seen)
            usage = found or usage
            if kept is not None:
                yield kept + b"\n\n"
        status = 200
    except httpx.TimeoutException:
        status = 504
        metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "timeout").inc()
        yield _error_event(timeout_error(upstream))
    except httpx.HTTPError as exc:
        status = 502
        metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "protocol").inc()
        yield _error_event(GatewayError(502, f"upstream {upstream.service} broke off: {exc}", code="bad_gateway"))
    finally:
        _finish(ledger, status, usage, seen, chunks)
        await asyncio.shield(response.aclose())


def _finish(ledger: Ledger, status: int, usage: Usage | None, seen: list[str], chunks: int) -> asyncio.Task:
    """Settle a stream with the upstream's usage when it ended well and reported one, else an estimate."""
    if usage is not None and status == 200:
        return ledger.settle(200, usage)
    return ledger.settle(status, Usage(), seen_text="".join(seen), seen_chunks=chunks)


def _error_event(exc: GatewayError) -> bytes:
    return b"data: " + json.dumps(envelope(exc.status, exc.message, code=exc.code)).encode() + b"\n\n"


def _event(event: bytes, wants_usage: bool, seen: list[str]) -> tuple[bytes | None, Usage | None]:
    """One SSE event: what to send on (None: drop it) and the usage it reports. Collects the text seen."""
    if not event.startswith(b"data:"):
        return event, None  # comments, keep-alives
    payload = event[5:].strip()
    if payload == b"[DONE]":
        return DONE, None
    try:
        data = json.loads(payload)
    except ValueError:
        return event, None
    if not isinstance(data, dict):
        return event, None
    for choice in data.get("choices") or ():
        if isinstance(choice, dict):
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(text, str):
                seen.append(text)
    usage = _usage_of(data)
    if usage is None or wants_usage:
        return event, usage
    if not data.get("choices"):
        return None, usage  # the usage-only chunk the client did not ask for
    data.pop("usage")
    return b"data: " + json.dumps(data, separators=(",", ":")).encode(), usage
