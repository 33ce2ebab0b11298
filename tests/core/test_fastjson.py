"""apps.core.db.fastjson: orjson's text, byte for byte what the json module gives for the values the hot paths send."""

import datetime as dt
import json
import uuid
from decimal import Decimal

import pytest

from apps.core.db import fastjson
from apps.core.db.bulk import _json_default
from apps.core.reconcile import spec_hash
from apps.jobs import manifests
from apps.jobs.spec import JobSpec, normalize_spec


def _stdlib_canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _stdlib_compact(value):
    return json.dumps(value, default=_json_default, separators=(",", ":"), ensure_ascii=False)


def _workload():
    spec = JobSpec.of(
        normalize_spec({"type": "training", "image": "busybox:1.36", "gpus": 4, "distributed": {"nodes": 2}})
    )
    return manifests.workload(
        spec,
        api_url="http://gryvia.internal:8000",
        placed_on=["node-a", "node-b"],
        reserved=True,
        name="train-1",
        namespace="t-acme",
        uid="123e4567-e89b-12d3-a456-426614174000",
        tenant="acme",
    )


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [True, None, {"z": "x", "y": -3}], "c": ""},
        [],
        {"nested": {"deep": [[[]]]}},
        {"quote": 'say "hi"\n\t\\', "control": "\x01"},
    ],
)
def test_canonical_is_the_stdlib_text(value):
    assert fastjson.canonical(value) == _stdlib_canonical(value)


def test_a_workload_manifest_hashes_as_it_did_with_the_json_module():
    import hashlib

    manifest = _workload()
    assert fastjson.canonical(manifest) == _stdlib_canonical(manifest)
    assert spec_hash(manifest) == hashlib.sha256(_stdlib_canonical(manifest)).hexdigest()[:16]


def test_canonical_falls_back_where_orjson_would_differ_or_refuse():
    unicode = {"name": "café ☕", "emoji": "🚀"}
    assert fastjson.canonical(unicode) == _stdlib_canonical(unicode)  # escaped as \\u..., not UTF-8
    big = {"n": 2**70}
    assert fastjson.canonical(big) == _stdlib_canonical(big)
    keyed = {1: "a", "0": "b"}
    assert fastjson.canonical({"k": {"x": 1}}) == _stdlib_canonical({"k": {"x": 1}})
    assert json.loads(fastjson.canonical(keyed)) == {"1": "a", "0": "b"}
    with pytest.raises(TypeError):  # what json refuses is refused, not quietly encoded by orjson
        fastjson.canonical({"when": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)})


def test_compact_is_the_stdlib_text_with_the_bulk_default():
    value = [
        {
            "k": 7,
            "h0": True,
            "v0": dt.datetime(2026, 12, 4, 17, 0, 0, 123456, tzinfo=dt.UTC),
            "v1": {"j": {"café": [1, 2]}},
            "v2": Decimal("12.500"),
            "v3": uuid.UUID("123e4567-e89b-12d3-a456-426614174000"),
            "v4": dt.timedelta(seconds=90),
            "v5": dt.date(2026, 12, 4),
            "v6": None,
        }
    ]
    assert fastjson.compact(value, _json_default) == _stdlib_compact(value)
    assert fastjson.compact([{"n": 2**70}], _json_default) == _stdlib_compact([{"n": 2**70}])


def test_compact_reports_what_the_default_refuses():
    with pytest.raises(TypeError, match="cannot send a set value"):
        fastjson.compact([{"v": {1, 2}}], _json_default)
