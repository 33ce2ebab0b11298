"""What the stand-in upstream answers, OpenAI's way: its knobs, how it counts tokens, its error envelope, the
completion (whole, or the templates a stream is cut from), embedding and /tokenize bodies. benchmarks.upstream serves
them over HTTP.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import math
import struct
import time
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

DEFAULT_MODELS = ("stand-in-chat", "stand-in-embed")
ANY_MODEL = "*"  # in model_ids: serve any model name (not listed by /v1/models)
WORDS = ("Hello", " from", " the", " stand", "-in", " upstream", ",", " one", " token", " per", " chunk", ".")
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error"}
ERROR_TYPES |= {404: "invalid_request_error", 411: "invalid_request_error", 429: "rate_limit_error"}
dumps = json.JSONEncoder(separators=(",", ":")).encode


def _piece(choice: dict[str, Any]) -> bytes:
    """`,"choices":[…]` bytes, spliced after a chunk's per-request prefix."""
    return b"," + dumps({"choices": [choice]})[1:-1].encode()


def _delta(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _piece({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish})


def _text_piece(text: str, finish: str | None = None) -> bytes:
    return _piece({"text": text, "index": 0, "logprobs": None, "finish_reason": finish})


# Stream chunks are templates: per request only the id/created/model prefix is built, never a json.dumps per chunk.
CHAT_FIRST = _delta({"role": "assistant", "content": WORDS[0]})
MIDS = {True: tuple(_delta({"content": w}) for w in WORDS), False: tuple(_text_piece(w) for w in WORDS)}
FINISH = {
    (chat, why): _delta({}, why) if chat else _text_piece("", why)
    for chat in (True, False)
    for why in ("stop", "length")
}
STREAM_END = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"  # the last event, then the chunked body's terminator


def frame(event: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(event), event)


@functools.lru_cache(maxsize=64)
def _text(tokens: int) -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(tokens))


@functools.lru_cache(maxsize=8)
def _vector_table(dim: int) -> tuple[list[float], bytes]:
    """A unit vector of `dim` float32 values, twice over, so each input's rotation of it is one slice."""
    raw = [math.sin(i * 0.7 + 1.0) for i in range(dim)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    packed = struct.pack(f"<{dim}f", *(v / norm for v in raw))
    return list(struct.unpack(f"<{dim}f", packed)) * 2, packed * 2  # float32 values: `float` and `base64` agree


def error_reply(status: int, message: str, code: str | None = None, param: str | None = None) -> tuple[int, bytes]:
    """A status and OpenAI's error envelope."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}).encode()


def text_tokens(value: Any) -> int:
    """Tokens of a prompt or embedding input: UTF-8 bytes // 4 (at least 1), a token array's length, a list's sum."""
    if isinstance(value, str):
        return max(1, len(value.encode()) // 4)
    if isinstance(value, list):
        return len(value) if value and isinstance(value[0], int) else sum(text_tokens(item) for item in value)
    return 0


def prompt_tokens(body: dict[str, Any], chat_framing: int = 0) -> int:
    """The prompt tokens that usage and /tokenize report: a chat's message texts count as one text, plus
    `chat_framing` tokens per message and as many again for the assistant primer (a chat template's markers)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return text_tokens(body.get("prompt", body.get("input", "")))
    size = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            size += len(content.encode())
        elif isinstance(content, list):
            size += sum(len(p["text"].encode()) for p in content if isinstance(p, dict) and "text" in p)
    return max(1, size // 4) + chat_framing * (len(messages) + 1)


class RecordedRequest(NamedTuple):
    """One request as received: header names lower-cased, the body parsed (None when empty or not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclasses.dataclass(frozen=True)
class Knobs:
    """How the stand-in behaves. `Upstream.set(**changes)` swaps in a new instance; each request reads one."""

    name: str = "upstream"  # in the x-upstream-name header, the completion id and system_fingerprint
    chunks: int = 8  # completion tokens when max_tokens does not cut them short
    chunk_delay_s: float = 0.0  # sleep between streamed chunks
    first_byte_delay_s: float = 0.0  # sleep before the response headers (not on /health)
    send_usage: bool = True  # False: never any usage, streamed or not
    fail_status: int | None = None  # answer every request but /health with this status and an error envelope
    close_before_response: bool = False  # read the request, then close the connection without a byte
    model_ids: tuple[str, ...] = DEFAULT_MODELS  # others get 404 model_not_found
    dimensions: int = 384  # embedding size when the request sets no `dimensions`
    max_model_len: int = 4096  # reported by /tokenize
    chat_framing: int = 0  # prompt tokens a chat template adds per message and for the primer (Gemma's: 5)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_ids", tuple(self.model_ids))
        if min(self.chunks, self.chunk_delay_s, self.first_byte_delay_s) < 0 or self.dimensions < 1:
            raise ValueError(f"chunks and delays must be >= 0 and dimensions >= 1: {self}")


class Prepared:
    """What depends only on the knobs, built once per `set` instead of once per request."""

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self.name_header = f"x-upstream-name: {knobs.name}\r\n".encode()
        self.fingerprint = f"fp_{knobs.name}"
        self.models = frozenset(knobs.model_ids)
        ids = [m for m in knobs.model_ids if m != ANY_MODEL]
        data = [{"id": m, "object": "model", "created": 1_700_000_000, "owned_by": knobs.name} for m in ids]
        self.models_body = dumps({"object": "list", "data": data}).encode()
        self.sse_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        self.sse_head += b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n" + self.name_header

    def model_error(self, body: dict[str, Any], required: bool = True) -> tuple[int, bytes] | None:
        model = body.get("model")
        if model is None and not required:
            return None
        if not isinstance(model, str):
            return error_reply(400, "you must provide a model parameter", param="model")
        if ANY_MODEL in self.models or model in self.models:
            return None
        message = f"The model `{model}` does not exist or you do not have access to it."
        return error_reply(404, message, code="model_not_found", param="model")


def completion(body: dict[str, Any], prep: Prepared, *, chat: bool, seq: Iterator[int]) -> tuple[int, bytes] | list:
    """A (status, JSON) answer, or a list of `Upstream._stream`'s arguments when the request asks for a stream."""
    if error := prep.model_error(body):
        return error
    field = "messages" if chat else "prompt"
    if not isinstance(body.get(field), list if chat else (str, list)):
        return error_reply(400, f"{field} is required", param=field)
    knobs = prep.knobs
    limit = body.get("max_completion_tokens", body.get("max_tokens")) if chat else body.get("max_tokens")
    tokens = max(0, min(limit, knobs.chunks)) if isinstance(limit, int) else knobs.chunks
    finish = "length" if tokens < knobs.chunks else "stop"
    usage = None
    if knobs.send_usage:
        prompt = prompt_tokens(body, knobs.chat_framing)
        usage = {"prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens}
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{knobs.name}-{next(seq)}"
    model = body["model"]
    if body.get("stream") is True:
        options = body.get("stream_options")
        if not (isinstance(options, dict) and options.get("include_usage") is True):
            usage = None
        kind = "chat.completion.chunk" if chat else "text_completion"
        head = f'data: {{"id":"{rid}","object":"{kind}","created":{int(time.time())},"model":{dumps(model)},'
        head += f'"system_fingerprint":{dumps(prep.fingerprint)}'
        return [head.encode(), chat, tokens, finish, usage]
    if chat:
        message = {"role": "assistant", "content": _text(tokens), "refusal": None}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    else:
        choice = {"text": _text(tokens), "index": 0, "logprobs": None, "finish_reason": finish}
    kind = "chat.completion" if chat else "text_completion"
    payload = {"id": rid, "object": kind, "created": int(time.time()), "model": model, "choices": [choice]}
    payload["system_fingerprint"] = prep.fingerprint
    if usage:
        payload["usage"] = usage
    return 200, dumps(payload).encode()


def embeddings(body: dict[str, Any], prep: Prepared) -> tuple[int, bytes]:
    if error := prep.model_error(body):
        return error
    inputs = body.get("input")
    if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    dim = body.get("dimensions") or prep.knobs.dimensions
    if not isinstance(inputs, list) or not inputs or not isinstance(dim, int) or dim < 1:
        return error_reply(
            400, "input must be a non-empty string or list, dimensions a positive integer", param="input"
        )
    floats, packed = _vector_table(dim)
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        at = zlib.crc32(str(item).encode()) % dim  # the same input always gets the same vector
        vector = base64.b64encode(packed[at * 4 : (at + dim) * 4]).decode() if as_base64 else floats[at : at + dim]
        data.append({"object": "embedding", "index": index, "embedding": vector})
    payload: dict[str, Any] = {"object": "list", "data": data, "model": body["model"]}
    if prep.knobs.send_usage:
        payload["usage"] = {"prompt_tokens": text_tokens(inputs), "total_tokens": text_tokens(inputs)}
    return 200, dumps(payload).encode()


def tokenize(body: dict[str, Any], prep: Prepared) -> tuple[int, bytes]:
    if error := prep.model_error(body, required=False):
        return error
    if not isinstance(body.get("messages"), list) and not isinstance(body.get("prompt"), str):
        return error_reply(400, "send prompt (a string) or messages (a list)", param="prompt")
    count = prompt_tokens(body, prep.knobs.chat_framing)
    payload = {"count": count, "max_model_len": prep.knobs.max_model_len, "tokens": list(range(count))}
    return 200, dumps(payload).encode()
