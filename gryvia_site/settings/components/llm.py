"""The LLM gateway (/v1/) and the inference services behind it. docs/gateway.md."""

from django.core.exceptions import ImproperlyConfigured

from ..env import env_int, env_str

# Keys and routes are cached per process for this long; a change made through Gryvia drops the routes at once in
# the process that made it, and every other process sees it within this time.
GRYVIA_LLM_CACHE_TTL_S = float(env_str("GRYVIA_LLM_CACHE_TTL_S", "5"))
# Usage rows are written in batches, at most this long after the request ends (and at shutdown).
GRYVIA_LLM_METER_FLUSH_S = float(env_str("GRYVIA_LLM_METER_FLUSH_S", "1"))
# No byte from the upstream for this long: 504 (or, mid-stream, an error event and the stream ends).
GRYVIA_LLM_UPSTREAM_TIMEOUT_S = float(env_str("GRYVIA_LLM_UPSTREAM_TIMEOUT_S", "120"))
GRYVIA_LLM_CONNECT_TIMEOUT_S = float(env_str("GRYVIA_LLM_CONNECT_TIMEOUT_S", "5"))
# Reserved for the output when a request sets no max_tokens (bounded by the service's context length).
GRYVIA_LLM_DEFAULT_MAX_TOKENS = env_int("GRYVIA_LLM_DEFAULT_MAX_TOKENS", 1024)
# The reservation's bound of a chat prompt adds this many tokens per message (its role's markers and separators in
# the chat template) and as many again for the BOS and the assistant primer. Raise it for a template that adds more
# (a default system prompt) on a runtime without a tokenizer endpoint.
GRYVIA_LLM_CHAT_FRAMING_TOKENS = env_int("GRYVIA_LLM_CHAT_FRAMING_TOKENS", 8)
# The longest wait for a runtime's tokenizer endpoint (exact counts at the quota's edge, estimates for metering).
GRYVIA_LLM_TOKENIZE_TIMEOUT_S = float(env_str("GRYVIA_LLM_TOKENIZE_TIMEOUT_S", "1"))
# Production profile: each server process renews its lease in Redis every third of this; a process whose lease is
# gone is dead, and the settlement pass settles its open reservations as estimated usage.
GRYVIA_LLM_REPLICA_TTL_S = float(env_str("GRYVIA_LLM_REPLICA_TTL_S", "6"))
# Request bodies larger than this get 413.
GRYVIA_LLM_MAX_BODY_BYTES = env_int("GRYVIA_LLM_MAX_BODY_BYTES", 4 * 1024 * 1024)
for _name in (
    "GRYVIA_LLM_CACHE_TTL_S",
    "GRYVIA_LLM_METER_FLUSH_S",
    "GRYVIA_LLM_UPSTREAM_TIMEOUT_S",
    "GRYVIA_LLM_TOKENIZE_TIMEOUT_S",
    "GRYVIA_LLM_REPLICA_TTL_S",
):
    if globals()[_name] <= 0:
        raise ImproperlyConfigured(f"{_name} must be a positive number of seconds, got {globals()[_name]}")
if GRYVIA_LLM_DEFAULT_MAX_TOKENS < 1 or GRYVIA_LLM_MAX_BODY_BYTES < 1024 or GRYVIA_LLM_CHAT_FRAMING_TOKENS < 0:
    raise ImproperlyConfigured(
        "GRYVIA_LLM_DEFAULT_MAX_TOKENS must be ≥ 1, GRYVIA_LLM_MAX_BODY_BYTES ≥ 1024 and "
        "GRYVIA_LLM_CHAT_FRAMING_TOKENS ≥ 0"
    )

# Kubernetes backend: the images per runtime (empty: the pinned defaults in apps.llm.manifests) and the namespace
# of shared services (empty: gryvia-system).
GRYVIA_LLM_IMAGE_VLLM = env_str("GRYVIA_LLM_IMAGE_VLLM")
GRYVIA_LLM_IMAGE_TGI = env_str("GRYVIA_LLM_IMAGE_TGI")
GRYVIA_LLM_IMAGE_LLAMACPP = env_str("GRYVIA_LLM_IMAGE_LLAMACPP")
GRYVIA_LLM_IMAGE_LLAMACPP_CUDA = env_str("GRYVIA_LLM_IMAGE_LLAMACPP_CUDA")
GRYVIA_LLM_IMAGE_SENTENCE_TRANSFORMERS = env_str("GRYVIA_LLM_IMAGE_SENTENCE_TRANSFORMERS")
GRYVIA_LLM_SHARED_NAMESPACE = env_str("GRYVIA_LLM_SHARED_NAMESPACE")
# Local backend: CPU threads per model server, and per-runtime argv templates that replace the packaged servers
# ({python}, {model}, {served_model}, {host}, {port}); set in code (tests), not from the environment.
GRYVIA_LLM_LOCAL_THREADS = env_int("GRYVIA_LLM_LOCAL_THREADS", 2)
GRYVIA_LLM_LOCAL_COMMANDS: dict[str, list[str]] = {}
