"""The proxy app: every request goes to the upstream; the three chat routes are
windowed on the way. Responses, streamed or not, come back as the upstream sends them,
chunk by chunk (never read whole), with its status and headers, errors included.

``build_app(settings)`` gives the Starlette app uvicorn serves (``ctxwindow serve``) and
tests run in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
)
from starlette.routing import Route

from ctxwindow_serve import telemetry
from ctxwindow_serve.metrics import Metrics
from ctxwindow_serve.records import VisitLog, visit_entry
from ctxwindow_serve.relay import Relay
from ctxwindow_serve.security import (
    ASK_BROWSER,
    CLIENT_KEY_HEADER,
    BodyTooLarge,
    header_key,
    key_matches,
    page_key,
    read_body,
    request_headers,
)
from ctxwindow_serve.settings import ServeSettings
from ctxwindow_serve.shapes import CHAT, ROUTES, Shape
from ctxwindow_serve.ui import CONTENT_SECURITY_POLICY, RecentVisits, Visit
from ctxwindow_serve.upstream import Answer, Upstream, UpstreamUnreachable
from ctxwindow_serve.windowing import Outcome, Windowing, header_value

logger = logging.getLogger("ctxwindow.serve")

#: The status recorded when the client closed its request before the answer began.
CLIENT_GONE = 499

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class Proxy:
    """The state of one proxy: settings, the Windowers, the upstream session, metrics
    and the visit log."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.windowing = Windowing(settings)
        self.metrics = Metrics(settings.model)
        self.log: VisitLog | None = None
        self.upstream = Upstream(settings.upstream, settings.max_connections)
        self.recent = RecentVisits(settings.ui_visits) if settings.ui else None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.log = VisitLog(self.settings.log) if self.settings.log else None
        self.upstream.open()  # after the log, which may fail: no session left open
        try:
            yield
        finally:
            await self.upstream.close()
            if self.log is not None:
                self.log.close()

    # -- endpoints -----------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_endpoint(self, request: Request) -> Response:
        if not self._page_allowed(request):
            return _page_unauthorised()
        if request.query_params.get("format") == "json":
            return JSONResponse(self.metrics.to_dict())
        return PlainTextResponse(self.metrics.prometheus(), media_type="text/plain; version=0.0.4")

    async def ui(self, request: Request) -> Response:
        """The inspector's page of the most recent visits (only when enabled). Behind a
        client key, a browser is asked for it (as the password of HTTP Basic
        authentication); a script may send the proxy's header instead."""
        if not self._page_allowed(request):
            return _page_unauthorised()
        assert self.recent is not None, "the route exists only with [serve] ui = true"
        page = await run_in_threadpool(self.recent.page)  # a long page takes a while
        headers = {"content-security-policy": CONTENT_SECURITY_POLICY, "cache-control": "no-store"}
        # a lone surrogate (a body's "\ud83d") cannot be UTF-8: shown as the escape it came as
        return HTMLResponse(page.encode("utf-8", "backslashreplace"), headers=headers)

    def _page_allowed(self, request: Request) -> bool:
        """Whether a request for one of the proxy's own pages (/ui, /metrics) holds the
        client key: in the proxy's header, or as an HTTP Basic password (what a browser
        or a Prometheus scraper sends)."""
        expected, headers = self.settings.client_key, request.headers
        return key_matches(expected, header_key(headers)) or key_matches(
            expected, page_key(headers.get("authorization"))
        )

    async def forward(self, request: Request) -> Response:
        """Any request: checked, windowed when its route is one of the three, forwarded."""
        started = time.perf_counter()
        path: str = request.scope["path"]
        shape = ROUTES.get(path.rstrip("/")) if request.method == "POST" else None
        if not key_matches(self.settings.client_key, header_key(request.headers)):
            return _unauthorised(shape or CHAT)
        try:
            raw = await read_body(request.stream(), request.headers, self.settings.max_body_bytes)
        except BodyTooLarge as error:
            return JSONResponse(
                (shape or CHAT).error_body("request_too_large", str(error)), status_code=413
            )
        outcome: Outcome | None = None
        extra: dict[str, str] = {}
        if shape is not None:
            outcome = await self._visit(shape, raw)
            extra = {"x-ctxwindow": header_value(outcome), "x-ctxwindow-visit": uuid.uuid4().hex}
            if outcome.refusal is not None:  # says so in the header too, as every outcome
                self._finish(path, outcome, None, started, extra)
                return JSONResponse(outcome.refusal, status_code=400, headers=extra)
            raw = outcome.content
        unreachable: UpstreamUnreachable | None = None
        try:
            response = await self._send(request, raw, shape)
        except UpstreamUnreachable as error:
            unreachable = error
            response = self._unreachable(path, error, shape or CHAT)
        if response is None:  # the client left before the answer began: no one to answer
            if outcome is not None:
                self._finish(path, outcome, None, started, extra)
            return Response(status_code=CLIENT_GONE)
        if outcome is not None:
            status = None if unreachable else response.status_code
            self._finish(path, outcome, status, started, extra, unreachable)
        elif unreachable is None and response.status_code >= 400:
            self.metrics.upstream_error(path)
        if extra:
            response.headers.update(extra)
        return response

    # -- the steps -----------------------------------------------------------------
    async def _visit(self, shape: Shape, raw: bytes) -> Outcome:
        """The visit; a bug anywhere in it forwards the body as it came (and says so in
        the log), never a 500. Timed whole: the body's parsing and, for Anthropic and
        Responses, the adapters' conversions cost more than the core's visit."""
        started = time.perf_counter()
        try:
            outcome = await self.windowing.visit(shape, raw)
        except Exception as error:  # a bug of ours or a plugin's: the request still goes
            logger.warning(
                "windowing failed, forwarding untouched: %s: %s", type(error).__name__, error
            )
            kind = type(error).__name__
            outcome = Outcome(raw, "untouched", note=f"windowing failed: {kind}", reason=kind)
        outcome.visit_ms = (time.perf_counter() - started) * 1000
        return outcome

    def _unreachable(self, route: str, error: UpstreamUnreachable, shape: Shape) -> Response:
        """The 502 for a request the upstream could not be reached for: logged and
        counted apart from the upstream's own errors (it gave no answer)."""
        logger.warning("upstream %s unreachable: %s", error.host, error.cause)
        self.metrics.unreachable(route)
        message = f"ctxwindow proxy: upstream {error.host} unreachable: {error.cause}"
        return JSONResponse(shape.error_body("upstream_unreachable", message), status_code=502)

    async def _send(self, request: Request, content: bytes, shape: Shape | None) -> Response | None:
        """The upstream's answer as a response; None when the client left first.
        Raises :class:`UpstreamUnreachable`."""
        scope = request.scope
        path = scope.get("raw_path") or scope["path"].encode()  # as the client encoded it
        query = scope.get("query_string")
        target = (path + b"?" + query if query else path).decode("latin-1")
        headers = request_headers(request.headers.items())
        answer = await _unless_gone(
            self.upstream.send(request.method, target, headers, content), request
        )
        return None if answer is None else Relay(answer, shape or CHAT)

    def _finish(
        self,
        route: str,
        outcome: Outcome,
        status: int | None,
        started: float,
        extra: dict[str, str] | None = None,
        unreachable: UpstreamUnreachable | None = None,
    ) -> None:
        self.metrics.observe(route, outcome)
        if status is not None and status >= 400:
            self.metrics.upstream_error(route)
        proxy_ms = (time.perf_counter() - started) * 1000
        visit = (extra or {}).get("x-ctxwindow-visit", "")
        if self.recent is not None and outcome.history is not None and outcome.window is not None:
            self.recent.add(
                Visit(time.time(), visit, route, outcome.model, outcome.history, outcome.window)
            )
        if self.log is not None:
            cause = None if unreachable is None else str(unreachable)
            self.log.write(
                partial(visit_entry, time.time(), visit, route, outcome, status, proxy_ms, cause)
            )
        if telemetry.enabled():
            shape = ROUTES.get(route.rstrip("/"), CHAT)
            asked = outcome.budget.requested_output if outcome.budget else None
            telemetry.record_span(outcome, shape.provider, self.settings.upstream, asked)


async def _unless_gone(sending: Coroutine[Any, Any, Answer], request: Request) -> Answer | None:
    """The upstream's answer, or None (the request cancelled, its connection closed) if
    the client goes away before its headers come: an abandoned request must not keep
    the upstream generating and a connection taken (the Relay watches after that)."""
    task = asyncio.ensure_future(sending)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the proxy's own request was cancelled: so is the upstream's
        task.cancel()
        raise
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, UpstreamUnreachable):
        await task
    return None


async def _disconnected(request: Request) -> None:
    """Return when the client has gone (its body was read whole already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _page_unauthorised() -> Response:
    """A 401 for one of the proxy's pages, which makes a browser ask for the key."""
    message = (
        "ctxwindow proxy: give the proxy's key as the password (any user name), "
        f"or send it in the {CLIENT_KEY_HEADER} header"
    )
    return PlainTextResponse(message, status_code=401, headers=ASK_BROWSER)


def _unauthorised(shape: Shape) -> Response:
    message = f"ctxwindow proxy: send the proxy's key in the {CLIENT_KEY_HEADER} header"
    return JSONResponse(shape.error_body("authentication_error", message), status_code=401)


def build_app(settings: ServeSettings) -> Starlette:
    """The proxy as an ASGI app (its lifespan opens and closes the upstream client)."""
    proxy = Proxy(settings)
    routes = [
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/metrics", proxy.metrics_endpoint, methods=["GET"]),
    ]
    if settings.ui:  # off: /ui is the upstream's, like any other path
        routes.append(Route("/ui", proxy.ui, methods=["GET"]))
    routes.append(Route("/{path:path}", proxy.forward, methods=METHODS))
    app = Starlette(routes=routes, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app
