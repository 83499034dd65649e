"""HEAD answered as GET without its body (RFC 9110 9.3.2): the same status and headers, so a
client can learn an archive's length, type and ETag before it downloads.

FastAPI registers each route for the methods it names, so HEAD was 405 on every GET route. The
route runs as a GET; its answer's start goes out as it is, and the first piece of body ends the
answer empty. The server (uvicorn's cycle) already writes no body for HEAD and, the answer
complete, tells the app the client is gone, so a streamed answer stops being made.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """ASGI middleware: a HEAD request is routed as GET and answered without a body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass GETs and everything else on unchanged; run a HEAD as a GET, sending no body."""
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False

        async def sending(message: Message) -> None:
            nonlocal ended
            if ended:
                return  # the rest of the body, or a file's runs: nothing goes out after the end
            if message["type"] == "http.response.start":
                await send(message)
                return
            ended = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET"}, receive, sending)
