"""The upstream's answer sent back to the client: status and headers at once, then each
piece of the body as it arrives; a client that goes away stops the upstream's answer.

Starlette's ``StreamingResponse`` does the same with an anyio task group watching for
the disconnect, which costs ~0.2 ms a request (measured: 190 us against 13 us for this
one asyncio task, and none for an answer whose body has all arrived when it starts: it
is sent at once, its last piece marked as the last), a tenth of the proxy's latency bar.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ctxwindow_serve.security import response_headers
from ctxwindow_serve.upstream import Answer, UpstreamBroken


class Relay(Response):
    """A Starlette response whose body is the upstream's, streamed through unbuffered."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.status_code = answer.status
        self.background = None
        self.raw_headers = response_headers(answer.headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = self.answer
        gone = asyncio.Event()

        async def watch() -> None:
            """Wait for the client to go away, then stop the upstream's answer."""
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            answer.abort()

        # an answer that has all arrived is sent at once: no wait for the client to leave in
        watcher = None if answer.arrived else asyncio.get_running_loop().create_task(watch())
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code,
                 "headers": self.raw_headers}
            )  # fmt: skip
            more = True
            while more:  # the last piece says so when it is known to be the last: one send less
                chunk = await answer.read()
                more = bool(chunk) and not answer.ended
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
        except UpstreamBroken:
            if not gone.is_set():  # the upstream broke off: the client's connection closes
                raise
        finally:
            if watcher is not None:
                watcher.cancel()
            answer.close()
