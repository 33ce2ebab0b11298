"""Token counts when an upstream gives none: the runtime's own tokenizer endpoint when it has one, else UTF-8
bytes / 4 (flagged estimated). Nothing here downloads a tokenizer."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

logger = logging.getLogger(__name__)


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


async def count(
    client: httpx.AsyncClient, url: str | None, model: str, text: str, headers: dict[str, str]
) -> int | None:
    """Tokens in `text` by the runtime's tokenizer endpoint (vLLM-style /tokenize or llama.cpp's
    /extras/tokenize/count); None when it has none or it fails."""
    if not url or not text:
        return None if text else 0
    body = {"input": text} if url.endswith("/count") else {"model": model, "prompt": text}
    try:
        reply = await client.post(url, content=json.dumps(body), headers=headers, timeout=5.0)
        if reply.status_code == 200:
            data = reply.json()
            if isinstance(data.get("count"), int):
                return data["count"]
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
    except (httpx.HTTPError, ValueError):
        logger.info("tokenizer endpoint %s did not answer; counting by bytes", url)
    return None
