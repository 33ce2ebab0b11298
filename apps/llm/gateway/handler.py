"""The ASGI handler for /v1/: Django's, without the site's middleware, signals or per-request thread hops.

The site's middleware (sessions, CSRF, auth, security headers) serves the browser and the REST API; the gateway
authenticates keys itself and answers in OpenAI's shapes. Django's handler would also send `request_started` and
`request_finished` (whose receivers close database connections, in a thread) around each request; the gateway's
views make no database call on the request's thread, so this handler skips them. What it keeps: Django's request
object, URL resolution (against apps.llm.gateway.urls) and async views, and the cancellation of the view when the
client disconnects (a stream's relay then settles and meters what was sent). Bodies over GRYVIA_LLM_MAX_BODY_BYTES
get 413 before they are read in full.
"""

from __future__ import annotations

import asyncio
import io

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.urls import set_urlconf

from apps.core.security import query_credential_refusal

from .errors import error_response

URLCONF = "apps.llm.gateway.urls"


def is_gateway_path(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


class GatewayHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = convert_exception_to_response(self._get_response_async)

    async def get_response_async(self, request):
        set_urlconf(URLCONF)
        request.urlconf = URLCONF
        # The one site-wide rule this handler keeps: a key in the query string is refused, as everywhere else.
        return query_credential_refusal(request) or await self._middleware_chain(request)

    async def __call__(self, scope, receive, send) -> None:
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send) -> None:
        limit = settings.GRYVIA_LLM_MAX_BODY_BYTES
        declared = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._too_large(send, limit)
            return
        try:
            body = await self._read_body(receive, limit)
        except RequestAborted:
            return
        if body is None:
            await self._too_large(send, limit)
            return
        request, problem = self.create_request(scope, io.BytesIO(body))
        if request is None:
            await self.send_response(problem, send)
            return
        request._body = body  # read already, within our own limit (not DATA_UPLOAD_MAX_MEMORY_SIZE's)

        async def process() -> None:
            response = await self.run_get_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while the reply was sent

        tasks = [asyncio.create_task(self.listen_for_disconnect(receive)), asyncio.create_task(process())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
            else:
                task.cancel()  # the view (or the stream's relay) sees CancelledError and settles
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    @staticmethod
    async def _read_body(receive, limit: int) -> bytes | None:
        """The whole body, or None once it passes `limit` bytes."""
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _too_large(self, send, limit: int) -> None:
        message = f"the request body is larger than {limit} bytes (GRYVIA_LLM_MAX_BODY_BYTES)"
        await self.send_response(error_response(413, message, code="request_too_large"), send)
