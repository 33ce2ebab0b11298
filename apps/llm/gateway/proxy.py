"""One gateway request: authenticate, route, reserve, call the upstream, relay, settle and meter.

The upstream gets a fresh request: the client's body with the model name the service publishes upstream (and, when
streaming, `stream_options.include_usage` so usage comes back), and only the service's own credential; no header of
the client's is passed on. A connection that fails before any byte was sent is retried on the service's next replica,
then the next service of the name (by weight), then the alias's next target; an upstream 5xx moves to the next alias
target too. However the request ends (answered, failed, refused by the upstream, the client hanging up mid-stream),
its reservation is settled to what it used, and one usage row is queued for the meter.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse

from . import keys, limits, metrics, routes, tokens
from .errors import GatewayError, envelope, error_response
from .meter import meter
from .quota import Refused, Scope, counters
from .request import EMBEDDINGS, PATHS, Call, parse

logger = logging.getLogger(__name__)
DONE = b"data: [DONE]"
CLIENT_CLOSED = 499  # nginx's code for a client that hung up; recorded in usage rows, never sent
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()
_background: set[asyncio.Task] = set()


def client() -> httpx.AsyncClient:
    """This event loop's upstream client (connection pool)."""
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        timeout = httpx.Timeout(settings.GRYVIA_LLM_UPSTREAM_TIMEOUT_S, connect=settings.GRYVIA_LLM_CONNECT_TIMEOUT_S)
        limits_ = httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=30)
        found = _clients[loop] = httpx.AsyncClient(timeout=timeout, limits=limits_, trust_env=False)
    return found


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
            headers = _headers(upstream)
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


def _headers(upstream: routes.Upstream) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    if upstream.credential:
        headers["authorization"] = f"Bearer {upstream.credential}"
    return headers


def _refused(exc: Refused) -> GatewayError:
    scope = exc.scope
    resets = scope.resets_at.isoformat().replace("+00:00", "Z")
    retry_after = max(int((scope.resets_at - dt.datetime.now(dt.UTC)).total_seconds()) + 1, 1)
    unit = "requests" if scope.kind == limits.REQUESTS_PER_MINUTE else "tokens"
    message = (
        f"{scope.label} exceeded: {exc.used} of {scope.limit} {unit} used, this request needs up to {exc.asked}; "
        f"resets at {resets}"
    )
    headers = {"retry-after": str(retry_after), "x-ratelimit-reset": resets}
    return GatewayError(429, message, code=f"{scope.kind}_exceeded", param=None, headers=headers)


async def handle(raw: bytes, authorization: str | None, endpoint: str) -> HttpResponse:
    """Answer one POST to /v1/chat/completions, /v1/completions or /v1/embeddings."""
    started = time.monotonic()
    key = await keys.authenticate(authorization)
    call = parse(raw, endpoint)
    now = dt.datetime.now(dt.UTC)
    ledger = Ledger(key=key, call=call, started=started, created_at=now, request_id=uuid.uuid4().hex)
    try:
        groups = await _routes(key, call)
        await _reserve(ledger, groups, now)
    except GatewayError as exc:
        ledger.settle(exc.status, Usage())
        raise
    try:
        return await _forward(ledger, groups)
    except GatewayError as exc:
        ledger.settle(exc.status, Usage())
        raise
    except BaseException:
        ledger.settle(CLIENT_CLOSED, Usage())
        raise


async def _routes(key: keys.KeyInfo, call: Call) -> list[list[routes.Upstream]]:
    not_found = GatewayError(
        404, f"The model `{call.model}` does not exist or you do not have access to it.", code="model_not_found"
    )
    if not key.may_call(call.model):
        raise not_found
    groups = (await routes.table()).resolve(key.tenant_id, call.model)
    if not groups:
        raise not_found
    want = "embeddings" if call.endpoint == EMBEDDINGS else "chat"
    fitting = [[u for u in group if u.task == want] for group in groups]
    fitting = [group for group in fitting if group]
    if not fitting:
        kind = "an embeddings model" if want == "chat" else "not an embeddings model"
        raise GatewayError(400, f"model {call.model} is {kind}: call it at another endpoint", param="model")
    return fitting


async def _reserve(ledger: Ledger, groups: list[list[routes.Upstream]], now: dt.datetime) -> None:
    key, call = ledger.key, ledger.call
    token_scopes = limits.token_scopes(key, now)
    rate = limits.request_scope(key, now)
    if not token_scopes and rate is None:
        return
    context = min((u.context_length for g in groups for u in g if u.context_length), default=None)
    amount = call.reserve_for(context)
    scopes, amounts = list(token_scopes), [amount] * len(token_scopes)
    if rate is not None:
        scopes.append(rate)
        amounts.append(1)
    try:
        await counters().reserve(scopes, amounts)
    except Refused as exc:
        metrics.QUOTA_REJECTIONS.labels(key.tenant_slug, exc.scope.kind).inc()
        raise _refused(exc) from None
    ledger.scopes, ledger.reserved = token_scopes, amount


def _upstream_body(call: Call, upstream: routes.Upstream) -> bytes:
    body = dict(call.body)
    body["model"] = upstream.upstream_model
    if call.stream:
        body["stream_options"] = {**(call.body.get("stream_options") or {}), "include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


async def _forward(ledger: Ledger, groups: list[list[routes.Upstream]]) -> HttpResponse:
    """Send to the first upstream that answers; an answer with a 5xx moves on to the next alias target."""
    call = ledger.call
    last_5xx: httpx.Response | None = None
    for group in groups:
        answer = await _connect(call, group)
        if answer is None:
            continue  # nobody in this group took the connection
        upstream, response = answer
        ledger.service, ledger.upstream = upstream.service, upstream
        if response.status_code >= 500:
            metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "status").inc()
            await _read(response, upstream)
            last_5xx = response
            continue
        if call.stream and response.status_code == 200:
            return _stream(ledger, response)
        return await _whole(ledger, response)
    if last_5xx is not None:
        return _relay_error(ledger, last_5xx)
    raise GatewayError(502, f"no upstream of model {call.model} could be reached", code="bad_gateway")


async def _connect(call: Call, group: list[routes.Upstream]) -> tuple[routes.Upstream, httpx.Response] | None:
    """The first of the group's services (by weight) and replicas (in turn) that answers; a connection refused or
    timed out before anything was sent moves on to the next. None when none could be reached."""
    http = client()
    for upstream in routes.weighted_order(group):
        content, headers = _upstream_body(call, upstream), _headers(upstream)
        for base in upstream.endpoint_order():
            request = http.build_request("POST", base + PATHS[call.endpoint], content=content, headers=headers)
            try:
                return upstream, await http.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "connect").inc()
                logger.warning("gateway: %s (%s) refused the connection: %s", upstream.service, base, exc)
            except httpx.TimeoutException:
                metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "timeout").inc()
                raise _timeout(upstream) from None
            except httpx.HTTPError as exc:
                metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "protocol").inc()
                raise GatewayError(502, f"upstream {upstream.service} failed: {exc}", code="bad_gateway") from None
    return None


def _timeout(upstream: routes.Upstream) -> GatewayError:
    return GatewayError(
        504,
        f"upstream {upstream.service} did not answer within {settings.GRYVIA_LLM_UPSTREAM_TIMEOUT_S:g} s",
        code="upstream_timeout",
    )


async def _read(response: httpx.Response, upstream: routes.Upstream) -> bytes:
    """The whole body (the connection goes back to the pool)."""
    try:
        return await response.aread()
    except httpx.TimeoutException:
        raise _timeout(upstream) from None
    except httpx.HTTPError as exc:
        raise GatewayError(502, f"upstream {upstream.service} broke off: {exc}", code="bad_gateway") from None
    finally:
        await response.aclose()


def _relay_error(ledger: Ledger, response: httpx.Response) -> HttpResponse:
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


async def _whole(ledger: Ledger, response: httpx.Response) -> HttpResponse:
    upstream = ledger.upstream
    assert upstream is not None
    content = await _read(response, upstream)
    status = response.status_code
    if status >= 400:
        return _relay_error(ledger, response)
    try:
        data = json.loads(content)
    except ValueError:
        ledger.settle(502, Usage())
        raise GatewayError(
            502, f"upstream {upstream.service} sent a reply that is not JSON", code="bad_gateway"
        ) from None
    usage = _usage_of(data)
    if usage is not None:
        ledger.settle(status, usage)
    else:
        ledger.settle(status, Usage(), seen_text=_output_text(data))
    reply = HttpResponse(content, status=status, content_type="application/json")
    reply["X-Request-Id"] = ledger.request_id
    return reply


def _stream(ledger: Ledger, response: httpx.Response) -> StreamingHttpResponse:
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
                if done:  # all sent: a client that hangs up now (as clients do on [DONE]) got the whole answer
                    status = 200
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
        yield _error_event(_timeout(upstream))
    except httpx.HTTPError as exc:
        status = 502
        metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "protocol").inc()
        yield _error_event(GatewayError(502, f"upstream {upstream.service} broke off: {exc}", code="bad_gateway"))
    finally:
        text = "".join(seen)
        if usage is not None and status == 200:
            ledger.settle(200, usage)
        else:
            ledger.settle(status, Usage(), seen_text=text, seen_chunks=chunks)
        await asyncio.shield(response.aclose())


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
