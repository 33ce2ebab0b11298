"""ClusterBackend over the Kubernetes REST API, generic over ResourceKind, with the official `kubernetes` client.

Only `ApiClient.param_serialize` and `ApiClient.call_api` are used: no typed per-kind APIs (kubernetes 37 validates
dict bodies client-side with pydantic there) and no model deserialisation. Every call takes a token from a client-side
TokenBucket first and carries a (connect, read) `_request_timeout`; every failure becomes a typed ClusterError.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, ApiException, Configuration
from kubernetes.watch.watch import iter_resp_lines

from apps.cluster.backends.base import (
    EVENT,
    FIELD_MANAGER,
    POD,
    ClusterError,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NamespaceMissingError,
    NotFoundError,
    ObjectRef,
    ResourceKind,
    UnavailableError,
    WatchEvent,
)
from apps.cluster.ratelimit import TokenBucket

APPLY_PATCH = "application/apply-patch+yaml"
LOG_IDLE_TIMEOUT_S = 60.0  # a followed log quiet this long is reopened (the pod may have ended without EOF)
_DELETE_OPTIONS = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}


def _status_body(body: str | bytes | None) -> tuple[str, dict[str, Any]]:
    """The `message` of a Kubernetes Status body (or a short excerpt of whatever came back), and its `details`."""
    if not body:
        return "", {}
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:200], {}
    if not isinstance(data, dict):
        return "", {}
    details = data.get("details")
    return str(data.get("message") or ""), details if isinstance(details, dict) else {}


def error_for_status(status: int, message: str) -> ClusterError:
    """Map an HTTP status from the API server to the matching ClusterError subclass."""
    if status == 404:
        return NotFoundError(message)
    if status == 409:
        return ConflictError(message)
    if status in (401, 403):
        return ForbiddenError(message, status=status)
    if status in (400, 422):
        return InvalidError(message, status=status)
    if status == 0 or status == 429 or status >= 500:
        return UnavailableError(message, status=status or None)
    return ClusterError(message, status=status)


def translate_api_exception(exc: ApiException, method: str, path: str) -> ClusterError:
    """Turn a kubernetes ApiException into a ClusterError whose message names the call and the server's reason.

    A 404 naming the namespace of the path (NamespaceLifecycle's answer to a write into a namespace that does not
    exist) is a NamespaceMissingError: the namespace must be made before anything can go into it."""
    status = int(exc.status or 0)
    message, details = _status_body(exc.body)
    text = f"{method} {path}: {status} {message or (exc.reason or '').strip()}".rstrip()
    missing = details.get("name") if details.get("kind") == "namespaces" else None
    if status == 404 and missing and f"/namespaces/{missing}/" in path:
        return NamespaceMissingError(text, namespace=str(missing))
    return error_for_status(status, text)


def _stream_lines(raw: Any) -> Iterator[str]:
    """Lines (with their newline) of a streamed body as they arrive; a last unterminated line gets one."""
    buffer = b""
    for chunk in raw.stream(amt=None, decode_content=True):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace") + "\n"
    if buffer:
        yield buffer.decode("utf-8", "replace") + "\n"


def _timestamp_key(stamp: str) -> str:
    """An RFC 3339 timestamp with nanoseconds padded, so that keys compare in time order as strings."""
    base, _, fraction = stamp.rstrip("Z").partition(".")
    return f"{base}.{fraction.ljust(9, '0')}Z"


def _with_type(kind: ResourceKind, obj: dict[str, Any]) -> dict[str, Any]:
    """List items come back without apiVersion/kind; put them back so every returned object is self-describing."""
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    return obj


class KubernetesBackend:
    """A ClusterBackend that talks to a real (or emulated) Kubernetes API server."""

    name = "kubernetes"

    def __init__(
        self, api_client: ApiClient | None = None, *, qps: float = 20, burst: int = 30, timeout_s: float = 10.0
    ) -> None:
        self.api_client = api_client if api_client is not None else self._default_client()
        self.bucket = TokenBucket(qps, burst)
        self.timeout_s = timeout_s

    @staticmethod
    def _client(configuration: Configuration) -> ApiClient:
        """An ApiClient with one retry policy, ours: a failed call fails at once (urllib3 would otherwise retry it
        3 times, logging each), and the reconciler that made it retries on its own schedule, with backoff."""
        configuration.retries = False
        configuration.client_go_retries = False
        return ApiClient(configuration)

    @classmethod
    def _default_client(cls) -> ApiClient:
        """In-cluster service-account config when running in a pod, else the local kubeconfig."""
        configuration = Configuration()
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except kube_config.ConfigException:
            try:
                kube_config.load_kube_config(client_configuration=configuration)
            except kube_config.ConfigException as exc:
                raise UnavailableError(f"no in-cluster config and no usable kubeconfig: {exc}") from exc
        return cls._client(configuration)

    @classmethod
    def for_host(cls, url: str, **kw: Any) -> KubernetesBackend:
        """A backend for a plain-http API server at `url` (no auth), e.g. a local emulator in tests."""
        return cls(cls._client(Configuration(host=url.rstrip("/"))), **kw)

    # -- transport ---------------------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        read_timeout: float | None = None,
    ) -> Any:
        """One rate-limited HTTP call; returns the RESTResponse (body unread) or raises a ClusterError."""
        self.bucket.acquire()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, v) for k, v in (query or {}).items() if v not in (None, "")]
        timeout = (self.timeout_s, read_timeout if read_timeout is not None else self.timeout_s)
        try:
            req = self.api_client.param_serialize(
                method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            resp = self.api_client.call_api(*req, _request_timeout=timeout)
            if not 200 <= resp.status <= 299:
                resp.read()
                ApiException.from_response(http_resp=resp, body=None, data=None)  # always raises
        except ApiException as exc:
            raise translate_api_exception(exc, method, path) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise UnavailableError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return resp

    def _json(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        resp = self._request(method, path, **kw)
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise UnavailableError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        try:
            return json.loads(data) if data else {}
        except ValueError as exc:
            raise UnavailableError(f"{method} {path}: response is not JSON: {data[:200]!r}") from exc

    @staticmethod
    def _ref_of(manifest: dict[str, Any]) -> ObjectRef:
        ref = ObjectRef.of(manifest)
        if ref.kind.namespaced and not ref.namespace:
            raise InvalidError(f"{ref.kind.kind} {ref.name!r} needs metadata.namespace")
        return ref

    # -- ClusterBackend ----------------------------------------------------------------------------------------

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply as field manager `gryvia`, forcing ownership of conflicting fields."""
        ref = self._ref_of(manifest)
        path = ref.kind.path(namespace=ref.namespace, name=ref.name)
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        return _with_type(ref.kind, self._json("PATCH", path, query=query, body=manifest, content_type=APPLY_PATCH))

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """POST to the collection; ConflictError when the object already exists."""
        ref = self._ref_of(manifest)
        path = ref.kind.path(namespace=ref.namespace)
        return _with_type(ref.kind, self._json("POST", path, query={"fieldManager": FIELD_MANAGER}, body=manifest))

    def get(self, ref: ObjectRef) -> dict[str, Any]:
        """Read one object; NotFoundError when absent."""
        return _with_type(ref.kind, self._json("GET", ref.kind.path(namespace=ref.namespace, name=ref.name)))

    def list(self, kind: ResourceKind, *, label_selector: str = "", namespace: str | None = None) -> list[dict]:
        """One LIST call; with `namespace=None` a namespaced kind is listed across all namespaces."""
        return self._list(kind, namespace=namespace, query={"labelSelector": label_selector})

    def _list(self, kind: ResourceKind, *, namespace: str | None, query: dict[str, str]) -> list[dict[str, Any]]:
        data = self._json("GET", kind.path(namespace=namespace), query=query)
        return [_with_type(kind, item) for item in data.get("items") or []]

    def delete(self, ref: ObjectRef, *, grace_period_s: int | None = None, uid: str | None = None) -> bool:
        """Delete with background propagation; False when the object was already gone. `grace_period_s` and
        `uid` become DeleteOptions `gracePeriodSeconds` and `preconditions.uid` (a mismatch: 409, ConflictError)."""
        path = ref.kind.path(namespace=ref.namespace, name=ref.name)
        options: dict[str, Any] = dict(_DELETE_OPTIONS)
        if grace_period_s is not None:
            options["gracePeriodSeconds"] = int(grace_period_s)
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        try:
            self._request("DELETE", path, body=options).read()
        except NotFoundError:
            return False
        return True

    def watch(
        self,
        kind: ResourceKind,
        *,
        label_selector: str = "",
        namespace: str | None = None,
        timeout_s: float = 30.0,
    ) -> Iterator[WatchEvent]:
        """Stream events until `timeout_s` passes, then stop quietly (server- or client-side, whichever is first)."""
        deadline = time.monotonic() + timeout_s
        path = kind.path(namespace=namespace)
        query = {"watch": "true", "labelSelector": label_selector, "timeoutSeconds": str(max(1, math.ceil(timeout_s)))}
        raw = self._request("GET", path, query=query, read_timeout=timeout_s).response
        try:
            for line in iter_resp_lines(raw):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise UnavailableError(f"GET {path} (watch): bad event line {line[:200]!r}") from exc
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    message = f"GET {path} (watch): {obj.get('code')} {obj.get('message', '')}".rstrip()
                    raise error_for_status(int(obj.get("code") or 500), message)
                yield WatchEvent(type=str(event.get("type")), object=_with_type(kind, obj))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._shrink_read_timeout(raw, remaining)
        except urllib3.exceptions.ReadTimeoutError:
            return  # the client-side deadline passed with nothing new to report
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if time.monotonic() >= deadline:
                return
            raise UnavailableError(f"GET {path} (watch): {type(exc).__name__}: {exc}") from exc
        finally:
            raw.close()

    @staticmethod
    def _shrink_read_timeout(raw: Any, remaining: float) -> None:
        """Cap the socket's read timeout at the time left, so a quiet stream cannot outlive the deadline."""
        sock = getattr(getattr(raw, "connection", None), "sock", None)
        if sock is not None:
            sock.settimeout(max(remaining, 0.001))

    def pod_logs(self, *, namespace: str, pod: str, container: str | None = None, tail_lines: int | None = None) -> str:
        """The pod's log (optionally one container's, optionally only the last `tail_lines` lines) as text."""
        query = {"container": container or "", "tailLines": "" if tail_lines is None else str(tail_lines)}
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        resp = self._request("GET", path, query=query)
        try:
            return resp.read().decode("utf-8", "replace")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise UnavailableError(f"GET {path}: {type(exc).__name__}: {exc}") from exc

    def stream_pod_logs(self, *, namespace: str, pod: str, follow: bool, poll_s: float = 0.2) -> Iterator[str]:
        """The pod's log line by line. With `follow` the API server streams (`follow=true`); a stream that ends or
        stays quiet for LOG_IDLE_TIMEOUT_S while the pod still runs is reopened from the last line's timestamp.
        Errors of the first request are raised by this call; `poll_s` is for the local backend only."""
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        raw = self._open_log(path, follow=follow, since=None)
        return self._log_lines(path, raw, namespace=namespace, pod=pod, follow=follow)

    def _open_log(self, path: str, *, follow: bool, since: str | None) -> Any:
        query = {"follow": "true" if follow else "", "timestamps": "true" if follow else "", "sinceTime": since or ""}
        read_timeout = max(self.timeout_s, LOG_IDLE_TIMEOUT_S) if follow else None
        return self._request("GET", path, query=query, read_timeout=read_timeout).response

    def _log_lines(self, path: str, raw: Any, *, namespace: str, pod: str, follow: bool) -> Iterator[str]:
        last: str | None = None  # timestamp of the last line yielded (follow mode)
        skip_until: str | None = None  # after a reconnect: lines up to `last` were seen already
        while True:
            try:
                for line in _stream_lines(raw):
                    if follow:  # "<RFC 3339 timestamp> <text>"
                        stamp, _, text = line.rstrip("\n").partition(" ")
                        line = text + "\n"
                        key = _timestamp_key(stamp)
                        if skip_until is not None and key <= skip_until:
                            continue
                        skip_until, last = None, key
                    yield line
            except urllib3.exceptions.ReadTimeoutError as exc:
                if not follow:
                    raise UnavailableError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise UnavailableError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
            finally:
                raw.close()
            if not follow or self._pod_finished(namespace, pod):
                return
            skip_until = last
            raw = self._open_log(path, follow=True, since=last[:19] + "Z" if last else None)

    def _pod_finished(self, namespace: str, pod: str) -> bool:
        try:
            obj = self.get(ObjectRef(POD, pod, namespace))
        except NotFoundError:
            return True
        return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    def events(self, *, namespace: str, involved_name: str | None = None) -> list[dict[str, Any]]:
        """v1 Events in `namespace`, optionally only those about the object named `involved_name`."""
        selector = f"involvedObject.name={involved_name}" if involved_name else ""
        return self._list(EVENT, namespace=namespace, query={"fieldSelector": selector})

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self.api_client.close()
