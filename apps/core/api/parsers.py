"""Request body parsers: JSON, and YAML (`application/yaml`, `application/x-yaml`, `text/yaml`) for objects with a
manifest form. Both refuse NUL characters, which PostgreSQL cannot store in text or jsonb (a 500 there otherwise,
and SQLite would keep them)."""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser


def _nul_at(value: Any, where: str = "body") -> str | None:
    """Where in a parsed document a key or string holds a NUL character (`body.quotas[0].nominal`), if anywhere."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        here = f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]"
        if isinstance(key, str) and "\x00" in key:
            return where
        found = _nul_at(item, here)
        if found:
            return found
    return None


def refuse_nul(data: Any) -> Any:
    where = _nul_at(data)
    if where is not None:
        raise ParseError(f"a NUL character (\\u0000) in {where!r}: not allowed in any value or key")
    return data


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        return refuse_nul(super().parse(stream, media_type, parser_context))


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        # DRF hands other parsers than JSON's the raw stream, past Django's size check: apply the same limit
        # (a 413, apps.core.api.exceptions), also to a body whose Content-Length understates it.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(body) > limit:
            raise RequestDataTooBig("request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE")
        try:
            data = yaml.safe_load(body.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParseError(f"YAML parse error - {exc}") from exc
        if not isinstance(data, dict):
            raise ParseError("YAML body must be a mapping")
        return refuse_nul(data)


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"


class TextYAMLParser(YAMLParser):
    media_type = "text/yaml"
