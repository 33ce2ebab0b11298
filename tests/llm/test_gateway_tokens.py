"""The reservation's prompt bound is never below what an upstream counts (issue 26, item 5)."""

from __future__ import annotations

import pytest

from apps.llm.gateway.request import CHAT, COMPLETIONS, EMBEDDINGS, parse
from apps.llm.gateway.tokens import MEDIA_PART_TOKENS, prompt_bound
from benchmarks.upstream_replies import prompt_tokens


def _chat(*messages: dict, **extra) -> dict:
    return {"model": "m", "messages": list(messages), **extra}


@pytest.mark.parametrize("framing", [0, 5, 8])
@pytest.mark.parametrize("count", [1, 3, 12])
def test_the_chat_bound_covers_the_templates_framing_per_message(framing, count):
    """The stand-in frames like Gemma (5 tokens a message, 5 for the primer) and counts bytes / 4 of the text."""
    body = _chat(*[{"role": "user", "content": "Hi."} for _ in range(count)])
    assert prompt_bound(body, CHAT) >= prompt_tokens(body, framing)
    assert prompt_bound(body, CHAT) > prompt_bound(_chat(*body["messages"][1:]) if count > 1 else _chat(), CHAT)


def test_the_bound_counts_bytes_not_characters():
    """A byte-level tokenizer may spend a token per byte: four for an emoji, whatever bytes / 4 says."""
    assert prompt_bound({"prompt": "🙂" * 10}, COMPLETIONS) >= 40
    assert prompt_bound({"input": ["🙂" * 10, "ok"]}, EMBEDDINGS) >= 42


def test_tools_media_and_token_ids_are_bounded():
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    plain = _chat({"role": "user", "content": "What is the weather?"})
    assert prompt_bound({**plain, "tools": tools}, CHAT) > prompt_bound(plain, CHAT) + len(str(tools)) // 2
    image = _chat({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]})
    assert prompt_bound(image, CHAT) >= MEDIA_PART_TOKENS
    assert prompt_bound({"prompt": [1, 2, 3, 4]}, COMPLETIONS) == 4


def test_a_completions_list_reserves_output_for_each_prompt():
    one = parse(b'{"model": "m", "prompt": "a", "max_tokens": 10}', COMPLETIONS)
    three = parse(b'{"model": "m", "prompt": ["a", "b", "c"], "max_tokens": 10, "n": 2}', COMPLETIONS)
    assert one.reserve_for(None) == one.prompt_bound + 10
    assert three.reserve_for(None) == three.prompt_bound + 10 * 2 * 3
