"""YAML request bodies (`application/yaml`, `application/x-yaml`, `text/yaml`) for objects with a manifest form."""

from __future__ import annotations

import yaml
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = yaml.safe_load(stream.read().decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParseError(f"YAML parse error - {exc}") from exc
        if not isinstance(data, dict):
            raise ParseError("YAML body must be a mapping")
        return data


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"


class TextYAMLParser(YAMLParser):
    media_type = "text/yaml"
