"""YAML request bodies (`application/yaml`, `application/x-yaml`, `text/yaml`) for objects with a manifest form."""

from __future__ import annotations

import yaml
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser


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
        return data


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"


class TextYAMLParser(YAMLParser):
    media_type = "text/yaml"
