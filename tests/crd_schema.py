"""Validate Kubernetes objects against the CRD schemas in tests/fixtures/crds/ with `jsonschema`.

The CRD's `openAPIV3Schema` is turned into a JSON Schema the way the API server applies it with strict field
validation: an object schema that lists `properties` rejects fields it does not list unless it says
`x-kubernetes-preserve-unknown-fields: true` (or gives `additionalProperties`); `nullable: true` allows null; Go
regular expressions with inline flags after `^` are rewritten for Python.
CEL rules (`x-kubernetes-validations`) and list-map uniqueness are not checked.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_DIR = Path(__file__).parent / "fixtures" / "crds"
_LEADING_FLAGS = re.compile(r"\^\(\?([a-zA-Z]+)\)")


@functools.cache
def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the JSON Schema of that served version."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = _to_json_schema(schema)
    return out


def _to_json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _to_json_schema(value) for key, value in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.pop("nullable", False):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    if isinstance(out.get("pattern"), str):
        out["pattern"] = _python_pattern(out["pattern"])
    if "pattern" in out and "anyOf" in out:  # int-or-string: the pattern only applies to the string form
        pattern = out.pop("pattern")
        out["anyOf"] = [{**b, "pattern": pattern} if b.get("type") == "string" else b for b in out["anyOf"]]
    return out


def _python_pattern(pattern: str) -> str:
    """Go's RE2 takes inline flags anywhere (`^(?i)[a-z]...` in Kueue's CRDs); Python wants them first."""
    match = _LEADING_FLAGS.match(pattern)
    return f"(?{match.group(1)})^{pattern[match.end() :]}" if match else pattern


def kinds() -> list[tuple[str, str]]:
    return sorted(_crds())


def schema_for(api_version: str, kind: str) -> dict[str, Any]:
    try:
        return copy.deepcopy(_crds()[(api_version, kind)])
    except KeyError:
        raise LookupError(f"no CRD fixture for {api_version} {kind}") from None


def errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of `obj` (by its apiVersion and kind), as `path: message`; [] when valid."""
    schema = schema_for(obj.get("apiVersion", ""), obj.get("kind", ""))
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    found = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(obj)]
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        found.append("metadata.name: required")
    return sorted(found)


def validate(obj: dict[str, Any]) -> None:
    """Raise AssertionError listing the violations when `obj` does not match its CRD schema."""
    found = errors(obj)
    if found:
        raise AssertionError(f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}: " + "; ".join(found))
