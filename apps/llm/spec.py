"""Checking an inference service's or a model alias's fields: pure functions, no database.

Every error is a Django `ValidationError` naming the field (`{"url": "..."}`), with a reason a user can act on.
`clean_service` fills the defaults that depend on other fields (`model_name` from `name`, `upstream_model` from
`model` or `model_name`, `task` from `runtime`) and returns the values to store.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from apps.core.quantities import QuantityError, parse_quantity

from . import packaged
from .choices import Runtime, Task
from .models import MODEL_NAME

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MODEL_NAME_RE = re.compile(MODEL_NAME.regex.pattern)
# A Hugging Face style id (`org/name`, `name`) for vLLM and TGI.
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}(/[A-Za-z0-9][A-Za-z0-9._-]{0,199})?$")
_VERSION = re.compile(r"^[A-Za-z0-9._-]{0,50}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\s]")
LOCAL_RUNTIMES = (Runtime.LLAMACPP, Runtime.SENTENCE_TRANSFORMERS)
RESOURCE_KEYS = ("gpus", "cpu", "memory")
MAX_WEIGHT = 10_000
MAX_REPLICAS = 64
MAX_ARGS = 64
MAX_ALIAS_TARGETS = 8
MAX_ALLOWED_MODELS = 256
MAX_INT32 = 2**31 - 1
PRICE_PLACES = 6
PRICE_MAX = Decimal(10**8)  # the column holds 14 digits, 6 of them after the point
_URL = URLValidator(schemes=["http", "https"])


def _fail(field: str, message: str) -> ValidationError:
    return ValidationError({field: message})


def _int(field: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"must be a whole number from {low} to {high} (got {value!r})")
    if not low <= value <= high:
        raise _fail(field, f"must be from {low} to {high} (got {value})")
    return value


def clean_name(value: Any) -> str:
    if not isinstance(value, str) or not DNS_LABEL.match(value):
        raise _fail(
            "name",
            f"{value!r} is not a DNS label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
        )
    return value


def clean_model_name(value: Any, field: str = "model_name") -> str:
    if not isinstance(value, str) or not MODEL_NAME_RE.match(value):
        raise _fail(field, f"{value!r} is not a model name: {MODEL_NAME.message}")
    return value


def clean_model_names(value: Any, field: str, *, limit: int = MAX_ALLOWED_MODELS) -> list[str]:
    """A list of model names (e.g. a key's `allowed_models`), sorted and without repeats."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(field, "must be a list of model names")
    if len(value) > limit:
        raise _fail(field, f"at most {limit} model names")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not MODEL_NAME_RE.match(item):
            raise _fail(field, f"{field}[{index}]: {item!r} is not a model name: {MODEL_NAME.message}")
    return sorted(set(value))


def clean_limit(value: Any, field: str, high: int = MAX_INT32) -> int | None:
    """A per-minute or per-day limit: a positive whole number, or None for no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise _fail(field, f"must be a whole number from 1 to {high}, or null for no limit (got {value!r})")
    return value


def _clean_model(runtime: str, model: Any) -> str:
    if not isinstance(model, str) or not model.strip():
        what = {
            Runtime.EXTERNAL: "the upstream's model name",
            Runtime.VLLM: "a model id such as meta-llama/Llama-3.1-8B-Instruct",
            Runtime.TGI: "a model id such as meta-llama/Llama-3.1-8B-Instruct",
        }.get(runtime, "a packaged model or a file path")
        raise _fail("model", f"is required: {what}")
    if len(model) > 500 or "\x00" in model:
        raise _fail("model", "at most 500 characters, no NUL")
    if runtime == Runtime.EXTERNAL:
        if _CONTROL.search(model):
            raise _fail("model", f"{model!r}: the upstream's model name has no spaces or control characters")
        return model
    if runtime in LOCAL_RUNTIMES:
        names = [m.name for m in packaged.MODELS if m.runtime == runtime]
        if model in names:
            return model
        is_path = model.startswith("/") and ".." not in model.split("/") and not _CONTROL.search(model)
        if runtime == Runtime.LLAMACPP and is_path and not model.endswith(".gguf"):
            raise _fail("model", f"{model!r}: a llama.cpp model file ends in .gguf")
        if not is_path:
            raise _fail(
                "model",
                f"{model!r} is neither a packaged {runtime} model ({', '.join(names)}) nor an absolute file path",
            )
        return model
    if _MODEL_ID.match(model) or (model.startswith("/") and not _CONTROL.search(model)):
        return model
    raise _fail("model", f"{model!r} is not a model id such as meta-llama/Llama-3.1-8B-Instruct, or an absolute path")


def _clean_url(runtime: str, url: Any) -> str:
    if url in (None, ""):
        if runtime == Runtime.EXTERNAL:
            raise _fail("url", "is required for an external service: its OpenAI-compatible base URL, e.g. https://…/v1")
        return ""
    if runtime != Runtime.EXTERNAL:
        raise _fail("url", f"only external services have a url; Gryvia runs {runtime} services itself")
    if not isinstance(url, str) or len(url) > 500:
        raise _fail("url", "must be an http(s) URL of at most 500 characters")
    try:
        _URL(url)
    except ValidationError as exc:
        raise _fail("url", f"{url!r} is not an http:// or https:// URL") from exc
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise _fail("url", "must not hold a user name or password: put the upstream's API key in credential")
    if parts.query or parts.fragment:
        raise _fail("url", "must not have a query or fragment: give the base URL (…/v1)")
    return url.rstrip("/")


def _clean_resources(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail("resources", 'must be a mapping such as {"gpus": 1, "cpu": "4", "memory": "16Gi"}')
    unknown = sorted(set(value) - set(RESOURCE_KEYS))
    if unknown:
        raise _fail("resources", f"unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(RESOURCE_KEYS)}")
    out: dict[str, Any] = {}
    if "gpus" in value:
        gpus = value["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 64:
            raise _fail("resources", f"resources.gpus: must be a whole number from 0 to 64 (got {gpus!r})")
        out["gpus"] = gpus
    for key in ("cpu", "memory"):
        if key not in value:
            continue
        raw = value[key]
        try:
            amount = parse_quantity(raw)
        except QuantityError as exc:
            raise _fail("resources", f"resources.{key}: {exc}") from exc
        if amount <= 0:
            raise _fail("resources", f"resources.{key}: must be more than 0 (got {raw!r})")
        out[key] = raw if isinstance(raw, str) else str(raw)
    return out


def _clean_args(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise _fail("args", 'must be a list of strings, e.g. ["--max-model-len", "8192"]')
    if len(value) > MAX_ARGS or any(len(a) > 1000 or "\x00" in a for a in value):
        raise _fail("args", f"at most {MAX_ARGS} arguments of at most 1000 characters, no NUL")
    return list(value)


def clean_price(value: Any, field: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise _fail(field, f"must be a number (got {value!r})")
    try:
        price = Decimal(str(value))
    except InvalidOperation as exc:
        raise _fail(field, f"{value!r} is not a number") from exc
    if not price.is_finite() or price < 0:
        raise _fail(field, f"must be a finite number of at least 0 (got {value!r})")
    if price.as_tuple().exponent < -PRICE_PLACES:
        raise _fail(field, f"at most {PRICE_PLACES} decimal places (got {value!r})")
    if price >= PRICE_MAX:
        raise _fail(field, f"must be less than {PRICE_MAX} per million tokens")
    return price.quantize(Decimal(1).scaleb(-PRICE_PLACES))  # as the column stores it


def default_upstream_model(runtime: str, model: str, model_name: str) -> str:
    return model if runtime == Runtime.EXTERNAL else model_name


def clean_service(spec: dict[str, Any]) -> dict[str, Any]:
    """Check every field of a service and return the values to store.

    `spec` holds all fields (a create's arguments, or an update's changes over the stored values); `model_name`,
    `upstream_model` empty and `task` None take their defaults.
    """
    out: dict[str, Any] = {"name": clean_name(spec.get("name"))}
    runtime = spec.get("runtime")
    if runtime not in Runtime.values:
        raise _fail("runtime", f"{runtime!r} is not a runtime: one of {', '.join(Runtime.values)}")
    out["runtime"] = runtime
    task = spec.get("task")
    if task is None:
        task = Task.EMBEDDINGS if runtime == Runtime.SENTENCE_TRANSFORMERS else Task.CHAT
    if task not in Task.values:
        raise _fail("task", f"{task!r} is not a task: one of {', '.join(Task.values)}")
    if runtime == Runtime.SENTENCE_TRANSFORMERS and task != Task.EMBEDDINGS:
        raise _fail("task", "sentence-transformers serves embeddings only")
    out["task"] = task
    out["model"] = _clean_model(runtime, spec.get("model"))
    out["model_name"] = clean_model_name(spec.get("model_name") or out["name"])
    upstream = spec.get("upstream_model") or default_upstream_model(runtime, out["model"], out["model_name"])
    if not isinstance(upstream, str) or len(upstream) > 500 or _CONTROL.search(upstream):
        raise _fail("upstream_model", "at most 500 characters, no spaces or control characters")
    out["upstream_model"] = upstream
    version = spec.get("version") or ""
    if not isinstance(version, str) or not _VERSION.match(version):
        raise _fail("version", f"{version!r}: at most 50 letters, digits and . _ -")
    out["version"] = version
    out["weight"] = _int("weight", spec.get("weight", 100), 0, MAX_WEIGHT)
    out["url"] = _clean_url(runtime, spec.get("url"))
    out["replicas"] = _int("replicas", spec.get("replicas", 1), 0, MAX_REPLICAS)
    out["resources"] = _clean_resources(spec.get("resources"))
    out["args"] = _clean_args(spec.get("args"))
    for field in ("price_input_per_1m", "price_output_per_1m"):
        out[field] = clean_price(spec.get(field, 0), field)
    context_length = spec.get("context_length")
    out["context_length"] = None if context_length is None else _int("context_length", context_length, 1, MAX_INT32)
    enabled = spec.get("enabled", True)
    if not isinstance(enabled, bool):
        raise _fail("enabled", f"must be true or false (got {enabled!r})")
    out["enabled"] = enabled
    return out


def clean_credential(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 4096 or _CONTROL.search(value):
        raise _fail("credential", "must be the upstream's API key: at most 4096 characters, no spaces or newlines")
    return value


def clean_alias(name: Any, targets: Any) -> tuple[str, list[str]]:
    """An alias's name and its targets (model names, in fallback order: non-empty, distinct, not itself)."""
    name = clean_model_name(name, "name")
    if not isinstance(targets, list) or not targets:
        raise _fail("targets", "must be a non-empty list of model names, in fallback order")
    if len(targets) > MAX_ALIAS_TARGETS:
        raise _fail("targets", f"at most {MAX_ALIAS_TARGETS} model names")
    seen: set[str] = set()
    for index, target in enumerate(targets):
        if not isinstance(target, str) or not MODEL_NAME_RE.match(target):
            raise _fail("targets", f"targets[{index}]: {target!r} is not a model name: {MODEL_NAME.message}")
        if target == name:
            raise _fail("targets", f"targets[{index}]: an alias cannot point at itself ({name!r})")
        if target in seen:
            raise _fail("targets", f"targets[{index}]: {target!r} is listed twice")
        seen.add(target)
    return name, list(targets)
