"""A /v1/ request body, checked: what the gateway needs to route, reserve and meter it.

Only what the gateway itself relies on is checked (the rest goes to the upstream as sent, which answers for it), so
the check costs a few dict lookups; each refusal is a 400 in OpenAI's envelope naming the parameter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from . import tokens
from .errors import GatewayError

CHAT, COMPLETIONS, EMBEDDINGS = "chat.completions", "completions", "embeddings"
PATHS = {CHAT: "/chat/completions", COMPLETIONS: "/completions", EMBEDDINGS: "/embeddings"}
MAX_N = 128


@dataclass
class Call:
    endpoint: str
    body: dict[str, Any]
    model: str
    stream: bool
    wants_usage: bool  # a streaming client that asked for the usage chunk
    prompt_estimate: int  # for metering, when the upstream reports no usage
    prompt_bound: int  # for the reservation: never below the upstream's count
    max_output: int | None  # what the client allows for the output (None: the default applies)
    n: int
    prompts: int = 1  # a completions prompt list: each prompt gets its own n outputs

    def reserve_for(self, context_length: int | None, prompt: int | None = None) -> int:
        """Tokens to reserve: the prompt's bound (or its exact count, `prompt`) plus the most output the request
        may produce."""
        prompt = self.prompt_bound if prompt is None else prompt
        if self.endpoint == EMBEDDINGS:
            return prompt
        output = self.max_output
        if output is None:
            output = settings.GRYVIA_LLM_DEFAULT_MAX_TOKENS
            if context_length:  # prompt and output share the context: its length bounds them both
                output = max(min(output, context_length - prompt), 1)
        return prompt + output * self.n * self.prompts


def _bad(message: str, param: str | None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def _positive_int(body: dict[str, Any], name: str, maximum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _bad(f"{name} must be a positive integer, got {json.dumps(value)[:50]}", name)
    if maximum is not None and value > maximum:
        raise _bad(f"{name} must be at most {maximum}, got {value}", name)
    return value


def parse(raw: bytes, endpoint: str) -> Call:
    """The checked request, or a 400 GatewayError."""
    try:
        body = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"the request body is not valid JSON: {exc}", None) from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", None)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _bad("you must provide a model parameter", "model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream must be true or false", "stream")
    if endpoint == CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("messages must be a non-empty array of message objects", "messages")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise _bad(f"messages[{i}] must be an object with a role", f"messages[{i}]")
    elif endpoint == COMPLETIONS:
        if not isinstance(body.get("prompt"), str | list):
            raise _bad("prompt must be a string or an array", "prompt")
    else:
        if stream:
            raise _bad("embeddings do not stream", "stream")
        value = body.get("input")
        if not isinstance(value, str | list) or not value:
            raise _bad("input must be a non-empty string or array", "input")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("stream_options must be an object", "stream_options")
    max_output = _positive_int(body, "max_completion_tokens") or _positive_int(body, "max_tokens")
    n = _positive_int(body, "n", MAX_N) or 1
    return Call(
        endpoint=endpoint,
        body=body,
        model=model,
        stream=stream,
        wants_usage=bool(stream and options and options.get("include_usage")),
        prompt_estimate=tokens.prompt_estimate(body, endpoint),
        prompt_bound=tokens.prompt_bound(body, endpoint),
        max_output=max_output,
        n=n,
        prompts=tokens.prompts(body, endpoint),
    )
