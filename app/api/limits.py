"""Request body size limits, enforced while the body streams in (not after it is spooled).

A declared ``Content-Length`` over the limit is refused before a byte is read. A body that grows
past the limit (chunked uploads, lying headers) stops being read at the limit and the response
becomes 413, whatever the route would have answered about its half-read body.

FastAPI's own ``max_body_size`` streams the same way but answers with its default ``{"detail"}``
body; this middleware keeps the dock's one error body on every 4xx.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body


class _BodyTooLarge(Exception):
    pass


async def _send_413(send: Send, limit: int) -> None:
    body = json.dumps(
        error_body("payload_too_large", f"request body is over the limit of {limit} bytes")
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodySizeLimit:
    """ASGI middleware: ``routes`` maps (method, path) to a limit; others get ``default``."""

    def __init__(self, app: ASGIApp, *, default: int, routes: Mapping[tuple[str, str], int]):
        self.app = app
        self.default = default
        self.routes = dict(routes)

    def limit_for(self, scope: Scope) -> int:
        return self.routes.get((scope["method"], scope["path"].rstrip("/")), self.default)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await _send_413(send, limit)
                    return
        received = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                raise _BodyTooLarge()
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _BodyTooLarge()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await _send_413(send, limit)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyTooLarge:
            if not started:
                await _send_413(send, limit)
