"""The HTTP client for Gryvia's REST API: auth headers, retries, timeouts, error envelopes, pages and streams."""

from __future__ import annotations

import json as jsonlib
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx

from . import __version__
from .errors import ApiError, CliError, ConnectionFailed

API_PREFIX = "/api/v1/"
TENANT_HEADER = "X-Gryvia-Tenant"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)  # a followed log can be quiet for a long time
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_STATUSES = frozenset({502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


class OAuthTokens:
    """An OAuth token set that can renew itself with its refresh token.

    `save` persists a renewed set; `reload` returns the set now on disk, so that when another `gryvia`
    process renewed first (refresh tokens rotate) this one takes its result instead of failing.
    """

    def __init__(
        self,
        tokens: dict[str, Any],
        *,
        save: Callable[[dict[str, Any]], None] | None = None,
        reload: Callable[[], dict[str, Any] | None] | None = None,
    ) -> None:
        self.tokens = dict(tokens)
        self.save = save
        self.reload = reload

    @property
    def access_token(self) -> str:
        return str(self.tokens.get("access_token") or "")

    @property
    def refresh_token(self) -> str | None:
        return self.tokens.get("refresh_token") or None

    @property
    def client_id(self) -> str:
        return str(self.tokens.get("client_id") or "gryvia-cli-device")

    def update(self, answer: dict[str, Any]) -> None:
        """Take a token endpoint answer; a refresh token the server did not rotate is kept."""
        self.tokens = token_set(answer, self.client_id, previous=self.tokens)
        if self.save:
            self.save(self.tokens)


def token_set(answer: dict[str, Any], client_id: str, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stored form of a token endpoint answer: tokens, absolute expiry, scope and client."""
    previous = previous or {}
    tokens = {
        "access_token": answer["access_token"],
        "refresh_token": answer.get("refresh_token") or previous.get("refresh_token"),
        "scope": answer.get("scope", previous.get("scope")),
        "client_id": client_id,
    }
    if isinstance(answer.get("expires_in"), int | float):
        tokens["expires_at"] = int(time.time() + answer["expires_in"])
    return {k: v for k, v in tokens.items() if v is not None}


def api_error(response: httpx.Response) -> ApiError:
    """An ApiError from an error answer: the API's envelope when there is one, else the HTTP status."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        fields = error.get("fields") if isinstance(error.get("fields"), dict) else None
        return ApiError(response.status_code, str(error["message"]), type=error.get("type"), fields=fields)
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return ApiError(response.status_code, body["detail"])
    reason = response.reason_phrase or "error"
    error = ApiError(response.status_code, f"HTTP {response.status_code} {reason} from {response.request.url}")
    if response.status_code == 413:  # a proxy's limit (Gryvia's own 413 names GRYVIA_MAX_BODY_BYTES itself)
        error.hint = "the request body is larger than the server, or a proxy in front of it, accepts"
    return error


class Client:
    """Talks to one Gryvia server as one credential, optionally narrowed to one tenant.

    Retries: connection failures (the request never reached the server), 429 (after Retry-After) and, for
    idempotent methods, 502/503/504 and read timeouts. A 401 with a refresh token renews it once and retries.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        oauth: OAuthTokens | None = None,
        tenant: str | None = None,
        retries: int = 2,
        backoff_s: float = 0.3,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.oauth = oauth
        self.tenant = tenant
        self.retries = retries
        self.backoff_s = backoff_s
        self.refreshed = False
        self._http = httpx.Client(
            base_url=self.url,
            timeout=timeout,
            transport=transport,
            headers={"User-Agent": f"gryvia-cli/{__version__}"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------------------------

    def _headers(self, accept: str, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": accept}
        token = self.api_key or (self.oauth.access_token if self.oauth else None)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self.tenant:
            headers[TENANT_HEADER] = self.tenant
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _url(self, path: str) -> str:
        """`jobs/x/` -> `/api/v1/jobs/x/`; a path starting with `/` is taken as is (e.g. `/o/token/`)."""
        return path if path.startswith("/") else API_PREFIX + path

    def _pause(self, attempt: int, response: httpx.Response | None = None) -> None:
        delay = self.backoff_s * (2**attempt)
        if response is not None and response.headers.get("Retry-After"):
            try:
                delay = min(max(float(response.headers["Retry-After"]), 0.0), MAX_RETRY_AFTER_S)
            except ValueError:
                pass
        time.sleep(delay)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
        stream: bool = False,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """Send one API request; answers >= 400 raise ApiError, unreachable servers ConnectionFailed.

        With `stream=True` the answer's body is not read: the caller must close the response.
        """
        method = method.upper()
        if json is not None:
            content, content_type = _json_bytes(json), "application/json"
        params = {k: v for k, v in (params or {}).items() if v is not None}
        attempt, renewed = 0, False
        while True:
            request = self._http.build_request(
                method,
                self._url(path),
                params=params,
                content=content,
                headers=self._headers(accept, content_type),
                timeout=timeout or self._http.timeout,
            )
            try:
                response = self._http.send(request, stream=stream)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt < self.retries:
                    self._pause(attempt)
                    attempt += 1
                    continue
                raise ConnectionFailed(self.url, _reason(exc)) from exc
            except httpx.TransportError as exc:  # the request may have reached the server
                if method in IDEMPOTENT and attempt < self.retries:
                    self._pause(attempt)
                    attempt += 1
                    continue
                raise ConnectionFailed(self.url, _reason(exc)) from exc
            status = response.status_code
            if status < 300:
                return response
            if status < 400:
                response.close()
                where = response.headers.get("Location", "elsewhere")
                raise CliError(f"{self.url} redirected {method} {request.url.path} to {where}: set --url to the server")
            if stream:
                response.read()
                response.close()
            if status == 401 and not renewed and self._renew():
                renewed = True
                continue
            if attempt < self.retries and (status == 429 or (status in RETRY_STATUSES and method in IDEMPOTENT)):
                self._pause(attempt, response)
                attempt += 1
                continue
            raise api_error(response)

    def decode(self, response: httpx.Response) -> Any:
        """The JSON body of a successful answer (None when empty); anything else is a clear error."""
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("Content-Type", "no content type")
            raise CliError(
                f"{response.request.url} answered {kind}, not JSON: is {self.url} a Gryvia server?"
            ) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.decode(self.request("GET", path, params=params))

    def post(self, path: str, body: Any = None) -> Any:
        return self.decode(self.request("POST", path, json=body if body is not None else {}))

    def delete(self, path: str) -> None:
        self.request("DELETE", path)

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of a paginated list, following `next` (its limit/offset, on this client's base URL)."""
        while True:
            page = self.get(path, **params)
            if not isinstance(page, dict) or "results" not in page:  # an unpaginated list
                yield {"count": len(page or []), "next": None, "results": list(page or [])}
                return
            yield page
            if not page.get("next"):
                return
            query = parse_qs(urlsplit(page["next"]).query)
            params = {**params, **{k: v[-1] for k, v in query.items()}}

    def list_all(self, path: str, **params: Any) -> list[dict[str, Any]]:
        return [item for page in self.pages(path, **params) for item in page["results"]]

    def stream_text(self, path: str, *, params: dict[str, Any] | None = None) -> Iterator[str]:
        """The body of a text answer, piece by piece as it arrives (for followed logs)."""
        response = self.request("GET", path, params=params, accept="text/plain", stream=True, timeout=STREAM_TIMEOUT)
        try:
            yield from response.iter_text()
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, f"the stream broke off: {_reason(exc)}") from exc
        finally:
            response.close()

    # -- OAuth -------------------------------------------------------------------------------------------

    def oauth_post(self, path: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """POST a form to the OAuth provider (no API credential); returns the status and the JSON answer."""
        try:
            response = self._http.post(path, data=form, headers={"Accept": "application/json"})
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.url, _reason(exc)) from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def _renew(self) -> bool:
        """After a 401: take tokens another process renewed, or renew with the refresh token. True if renewed."""
        if self.oauth is None or not self.oauth.refresh_token:
            return False
        on_disk = self.oauth.reload() if self.oauth.reload else None
        if on_disk and on_disk.get("access_token") not in (None, self.oauth.access_token):
            self.oauth.tokens = dict(on_disk)
            return True
        status, answer = self.oauth_post(
            "/o/token/",
            {
                "grant_type": "refresh_token",
                "refresh_token": self.oauth.refresh_token,
                "client_id": self.oauth.client_id,
            },
        )
        if status != 200 or not answer.get("access_token"):
            return False
        self.oauth.update(answer)
        self.refreshed = True
        return True


def job_path(name: str, action: str = "") -> str:
    """`jobs/<name>/` or `jobs/<name>/<action>/`, the name quoted so that it cannot reach another path."""
    return f"jobs/{quote(name, safe='')}/" + (f"{action}/" if action else "")


def _json_bytes(value: Any) -> bytes:
    return jsonlib.dumps(value).encode("utf-8")


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({text})" if str(exc) else "timed out"
    return text
