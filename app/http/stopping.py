"""A request that a stopping server cancels gets a coded answer, not uvicorn's plain 500."""

from __future__ import annotations

import asyncio
import threading

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.http.problems import problem


class RefusedWhenStopped:
    """The service, with each request that uvicorn cancels at the end of a graceful shutdown
    (its body was still arriving, or its work ran past the grace) refused with 503
    `server-stopping` and the connection closed, rather than uvicorn's plain 500."""

    def __init__(self, app: ASGIApp, stopping: threading.Event) -> None:
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the service; answer 503 if the request is cancelled by a stop before it answered."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if started or not self.stopping.is_set():
                raise
            refusal = problem("server-stopping", "the server stopped before this request was done")
            refusal.headers["connection"] = "close"
            await refusal(scope, receive, send)
