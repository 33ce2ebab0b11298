"""JSON text for the reconcile pass's hot paths, encoded by orjson (a C encoder several times faster than `json`'s).

- `canonical(value)`: sorted keys, no spaces, ASCII only, what `json.dumps(value, sort_keys=True,
  separators=(",", ":"))` gives. Manifest hashes (apps.core.reconcile.spec_hash) are taken over it, so the hash an
  earlier version stored for a manifest still matches and nothing is applied again after an upgrade. The one
  exception is a float, which the two encoders may spell differently (`1e+16`, `1e16`): such a manifest is applied
  once more. Kubernetes manifests carry quantities as strings.
- `compact(value, default)`: insertion order, no spaces, UTF-8, what `json.dumps(value, default=default,
  separators=(",", ":"), ensure_ascii=False)` gives, for the rows `apps.core.db.bulk.bulk_set` hands PostgreSQL.
  Datetimes go through `default`, as with `json`.

Text outside ASCII (for `canonical`) and integers beyond 64 bits go to the standard library, so the output never
depends on which encoder ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_COMPACT = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def not_json(value: Any) -> Any:
    """A `default` that accepts nothing beyond plain JSON, with the json module's error."""
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def canonical(value: Any) -> bytes:
    """`json.dumps(value, sort_keys=True, separators=(",", ":")).encode()`, faster."""
    try:
        out = orjson.dumps(value, default=not_json, option=_SORTED | orjson.OPT_PASSTHROUGH_DATETIME)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, or a type `json` reports itself
        pass
    else:
        if out.isascii():
            return out
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def compact(value: Any, default: Callable[[Any], Any]) -> str:
    """`json.dumps(value, default=default, separators=(",", ":"), ensure_ascii=False)`, faster."""
    try:
        return orjson.dumps(value, default=default, option=_COMPACT).decode()
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, or `default` refused a value: `json` says which
        return json.dumps(value, default=default, separators=(",", ":"), ensure_ascii=False)
