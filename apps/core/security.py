"""HTTP hardening for every surface: no credential in a URL, and a Content-Security-Policy on every HTML page.

A query string is written down in many places a header is not (access logs, proxies, browser history, the Referer
header of the next page), so a credential sent in one is a leaked credential. `QueryCredentialMiddleware` refuses
such a request before any view or authentication runs, with a 400 in the surface's own error format, and
`AccessLogScrubber` blanks the credential in uvicorn's access log line of that very request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from urllib.parse import parse_qsl, quote

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

# Query parameters that name a credential (RFC 6750 §2.3 `access_token`, and the usual spellings of API keys).
CREDENTIAL_PARAMS = frozenset(
    {"access_token", "refresh_token", "id_token", "token", "api_key", "apikey", "api-key", "client_secret"}
)
# A Gryvia API key (apps.tenants.keys.KEY_PATTERN) under any parameter name.
API_KEY_IN_TEXT = re.compile(r"gry_[A-Za-z0-9]{8,16}_[A-Za-z0-9]{32,}")
REDACTED = "[redacted]"

# Path prefix -> the refusal in that surface's own error format, `render(message, param)` (param: the first
# credential parameter). Apps whose surface has its own envelope add theirs in AppConfig.ready(); the LLM gateway
# registers OpenAI's under /v1/, as its clients parse it.
refusal_renderers: dict[str, Callable[[str, str], HttpResponse]] = {}


def register_refusal_renderer(prefix: str, render: Callable[[str, str], HttpResponse]) -> None:
    """Answer a credential in the URL of a path under `prefix` with `render(message, param)`."""
    refusal_renderers[prefix] = render


def query_credentials(query_string: str) -> list[str]:
    """The names of the parameters of `query_string` that carry a credential, in order."""
    return [
        name
        for name, value in parse_qsl(query_string, keep_blank_values=True)
        if value and (name.lower() in CREDENTIAL_PARAMS or API_KEY_IN_TEXT.search(value))
    ]


def scrub_query(path: str) -> str:
    """`path` (with its query string) with the value of every credential parameter replaced by [redacted]."""
    base, sep, query = path.partition("?")
    if not sep or not query_credentials(query):
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    kept = [
        (name, REDACTED if value and (name.lower() in CREDENTIAL_PARAMS or API_KEY_IN_TEXT.search(value)) else value)
        for name, value in pairs
    ]
    return base + "?" + "&".join(f"{quote(n, safe='')}={quote(v, safe='[]')}" for n, v in kept)


def _refusal(request: HttpRequest, names: list[str]) -> HttpResponse:
    listed = ", ".join(sorted(set(names)))
    message = (
        f"credentials are not accepted in the URL (query parameter {listed}): send them in the Authorization "
        "header as 'Bearer <token>', and revoke this one, since URLs are logged"
    )
    path = request.path_info
    for prefix, render in refusal_renderers.items():
        if path.startswith(prefix):
            return render(message, names[0])
    if path.startswith("/api/"):  # the REST API's own format (apps.core.api.exceptions)
        body = {"error": {"type": "invalid_request", "message": message}}
    elif path.startswith("/o/"):  # OAuth endpoints answer as RFC 6750 §3.1 says
        body = {"error": "invalid_request", "error_description": message}
    else:
        return HttpResponse(message + "\n", status=400, content_type="text/plain; charset=utf-8")
    return HttpResponse(json.dumps(body), status=400, content_type="application/json")


def query_credential_refusal(request: HttpRequest) -> HttpResponse | None:
    """The 400 for a request whose query string carries a credential, else None. The site's middleware below and
    the LLM gateway's own handler (apps.llm.gateway.handler, which runs no site middleware) both ask it."""
    query = request.META.get("QUERY_STRING", "")
    names = query_credentials(query) if query else []
    return _refusal(request, names) if names else None


class QueryCredentialMiddleware(MiddlewareMixin):
    """Refuses any request whose query string carries a credential (see the module's docstring)."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        return query_credential_refusal(request)


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """settings.GRYVIA_CONTENT_SECURITY_POLICY on every HTML answer (admin, login, OAuth consent, Swagger UI,
    invoices) that does not set its own."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if response.get("Content-Type", "").startswith("text/html") and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = settings.GRYVIA_CONTENT_SECURITY_POLICY
        return response


class AccessLogScrubber(logging.Filter):
    """Blanks credentials in the request paths uvicorn logs: the access log's request line (`uvicorn.access`) and the
    websocket handshake line (`uvicorn.error`), both passed as %-format arguments. The Authorization header is
    never logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(scrub_query(a) if isinstance(a, str) and "?" in a else a for a in record.args)
        return True
