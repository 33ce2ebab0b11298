"""Token counts without a local tokenizer (nothing here downloads one).

Two kinds: an upper bound for the quota reservation (`prompt_bound`: never below what the upstream will count, chat
framing included), and an estimate for metering when an upstream gives no usage (the runtime's own tokenizer
endpoint when it has one, else UTF-8 bytes / 4, flagged estimated).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from typing import Any

import httpx
from django.conf import settings

logger = logging.getLogger(__name__)
# A non-text content part (an image, audio) costs what its encoder makes of it, which its bytes do not bound
# (a short image URL can cost a thousand tokens): it is reserved at least this much.
MEDIA_PART_TOKENS = 2048


def text_of(body: dict[str, Any], endpoint: str) -> str:
    """The text a request sends to be read: chat messages' content, a completion prompt, embedding inputs."""
    if endpoint == "chat.completions":
        parts: list[str] = []
        for message in body.get("messages") or []:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(parts)
    value = body.get("prompt" if endpoint == "completions" else "input")
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(v for v in value if isinstance(v, str))
    return ""


def _text_bound(text: str) -> int:
    """At most one token per UTF-8 byte (byte-level BPE), plus one for SentencePiece's leading "▁"."""
    return len(text.encode()) + 1


def _content_bound(content: Any) -> int:
    if isinstance(content, str):
        return _text_bound(content)
    if not isinstance(content, list):
        return 0 if content is None else _text_bound(json.dumps(content))
    total = 0
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            total += _text_bound(part["text"])
        else:
            total += max(_text_bound(json.dumps(part)), MEDIA_PART_TOKENS)
    return total


def _ids_or_texts(value: Any) -> tuple[int, int]:
    """(tokens bound, prompts) of a completion prompt or embedding input: token ids count one each."""
    if isinstance(value, str):
        return _text_bound(value) + 1, 1  # the text and a BOS
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return len(value), 1
    if isinstance(value, list):
        parts = [_ids_or_texts(v) for v in value]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    return 0, 0


def prompt_bound(body: dict[str, Any], endpoint: str) -> int:
    """An upper bound of the prompt tokens the upstream will count, for the reservation: one token per UTF-8 byte
    of every text, and for chat the template's framing (GRYVIA_LLM_CHAT_FRAMING_TOKENS per message for its role
    and separators, as many again for the BOS and the assistant primer) plus the tools' JSON it renders."""
    if endpoint != "chat.completions":
        return _ids_or_texts(body.get("prompt" if endpoint == "completions" else "input"))[0]
    framing = settings.GRYVIA_LLM_CHAT_FRAMING_TOKENS
    total = framing  # BOS and the assistant primer
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        total += framing + _text_bound(str(message.get("role", ""))) + _content_bound(message.get("content"))
        for extra in ("name", "tool_calls", "tool_call_id", "function_call"):
            if message.get(extra) is not None:
                value = message[extra]
                total += _text_bound(value if isinstance(value, str) else json.dumps(value))
    for extra in ("tools", "functions"):
        if body.get(extra):
            total += _text_bound(json.dumps(body[extra]))
    return total


def prompts(body: dict[str, Any], endpoint: str) -> int:
    """How many prompts a request sends (each gets its own `n` outputs): several only for a completions list."""
    if endpoint != "completions":
        return 1
    return max(_ids_or_texts(body.get("prompt"))[1], 1)


def by_bytes(text: str) -> int:
    return max(len(text.encode()) // 4, 1) if text else 0


def prompt_estimate(body: dict[str, Any], endpoint: str) -> int:
    """What the prompt will likely cost, for the reservation (token-id inputs count one token each)."""
    value = body.get("prompt" if endpoint == "completions" else "input")
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return len(value)
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return sum(len(v) for v in value)
    return by_bytes(text_of(body, endpoint))


_exact: OrderedDict[tuple[str, str, str], int] = OrderedDict()  # (url, model, prompt digest) -> tokens
_EXACT_CACHED = 4096


def _tokenize_body(url: str, model: str, body: dict[str, Any], endpoint: str) -> dict[str, Any] | None:
    """What to send the runtime's tokenizer for the whole prompt as the model sees it; None when it cannot count it
    (llama.cpp's endpoint takes plain text only, so a chat's template is out of its reach)."""
    field = {"chat.completions": "messages", "completions": "prompt"}.get(endpoint, "input")
    value = body.get(field)
    if url.endswith("/count"):
        return {"input": value} if endpoint != "chat.completions" and isinstance(value, str) else None
    if endpoint == "chat.completions":
        out = {"model": model, "messages": value, "add_generation_prompt": True}
        if body.get("tools"):
            out["tools"] = body["tools"]
        return out
    return {"model": model, "prompt": value} if isinstance(value, str) else None


async def exact_prompt(
    client: httpx.AsyncClient, url: str, model: str, body: dict[str, Any], endpoint: str, headers: dict[str, str]
) -> int | None:
    """The prompt's tokens by the runtime's own tokenizer, chat template included (cached; a short timeout:
    GRYVIA_LLM_TOKENIZE_TIMEOUT_S); None when it cannot count this prompt or does not answer in time."""
    request = _tokenize_body(url, model, body, endpoint)
    if request is None:
        return None
    content = json.dumps(request, sort_keys=True, separators=(",", ":"))
    key = (url, model, hashlib.sha256(content.encode()).hexdigest())
    if key in _exact:
        _exact.move_to_end(key)
        return _exact[key]
    try:
        reply = await client.post(url, content=content, headers=headers, timeout=settings.GRYVIA_LLM_TOKENIZE_TIMEOUT_S)
        data = reply.json() if reply.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        logger.info("tokenizer endpoint %s did not answer; the prompt's bound stands", url)
        return None
    found = data.get("count") if isinstance(data.get("count"), int) else None
    if found is None and isinstance(data.get("tokens"), list):
        found = len(data["tokens"])
    if found is not None:
        _exact[key] = found
        if len(_exact) > _EXACT_CACHED:
            _exact.popitem(last=False)
    return found


async def count(
    client: httpx.AsyncClient, url: str | None, model: str, text: str, headers: dict[str, str]
) -> int | None:
    """Tokens in `text` by the runtime's tokenizer endpoint (vLLM-style /tokenize or llama.cpp's
    /extras/tokenize/count); None when it has none or it fails."""
    if not url or not text:
        return None if text else 0
    body = {"input": text} if url.endswith("/count") else {"model": model, "prompt": text}
    try:
        timeout = settings.GRYVIA_LLM_TOKENIZE_TIMEOUT_S
        reply = await client.post(url, content=json.dumps(body), headers=headers, timeout=timeout)
        if reply.status_code == 200:
            data = reply.json()
            if isinstance(data.get("count"), int):
                return data["count"]
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
    except (httpx.HTTPError, ValueError):
        logger.info("tokenizer endpoint %s did not answer; counting by bytes", url)
    return None
