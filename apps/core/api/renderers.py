"""`text/plain` for endpoints that serve text (logs); errors still come out as the JSON error envelope."""

from __future__ import annotations

import json
from typing import Any

from rest_framework.renderers import BaseRenderer


class PlainTextRenderer(BaseRenderer):
    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if isinstance(data, bytes):
            return data
        if isinstance(data, str):
            return data.encode(self.charset)
        return json.dumps(data).encode(self.charset)
