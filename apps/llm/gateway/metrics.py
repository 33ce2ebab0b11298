"""The gateway's Prometheus metrics (served at /metrics with the rest), per model and tenant."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from apps.core.metrics import REGISTRY

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

REQUESTS = Counter(
    "gryvia_llm_requests_total",
    "Gateway requests by model, tenant, endpoint and status code",
    ["model", "tenant", "endpoint", "code"],
    registry=REGISTRY,
)
TOKENS = Counter(
    "gryvia_llm_tokens_total",
    "Tokens metered by model, tenant and direction (input or output)",
    ["model", "tenant", "direction"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "gryvia_llm_request_duration_seconds",
    "Gateway request duration, to the last byte",
    ["model", "tenant"],
    registry=REGISTRY,
    buckets=LATENCY_BUCKETS,
)
TTFT = Histogram(
    "gryvia_llm_time_to_first_token_seconds",
    "Streamed requests: time to the first chunk",
    ["model", "tenant"],
    registry=REGISTRY,
    buckets=LATENCY_BUCKETS,
)
UPSTREAM_ERRORS = Counter(
    "gryvia_llm_upstream_errors_total",
    "Upstream failures by model, service and kind (connect, timeout, status)",
    ["model", "service", "kind"],
    registry=REGISTRY,
)
QUOTA_REJECTIONS = Counter(
    "gryvia_llm_quota_rejections_total",
    "Requests refused by a quota or rate limit, by tenant and scope",
    ["tenant", "scope"],
    registry=REGISTRY,
)
