"""The proxy app: every request goes to the upstream; the three chat routes are
windowed on the way. Responses, streamed or not, come back as the upstream sends them,
chunk by chunk (never read whole), with its status and headers, errors included.

``build_app(settings)`` gives the Starlette app uvicorn serves (``ctxwindow serve``) and
tests run in a thread.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from ctxwindow_serve import telemetry
from ctxwindow_serve.metrics import Metrics
from ctxwindow_serve.records import VisitLog, visit_entry
from ctxwindow_serve.security import (
    CLIENT_KEY_HEADER,
    BodyTooLarge,
    key_matches,
    read_body,
    request_headers,
    response_headers,
)
from ctxwindow_serve.settings import ServeSettings
from ctxwindow_serve.shapes import CHAT, ROUTES, Shape
from ctxwindow_serve.ui import CONTENT_SECURITY_POLICY, RecentVisits, Visit
from ctxwindow_serve.windowing import Outcome, Windowing, header_value

logger = logging.getLogger("ctxwindow.serve")

#: The upstream may take its time to answer (a long generation): no read timeout.
UPSTREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=10.0)
UPSTREAM_LIMITS = httpx.Limits(max_connections=200, max_keepalive_connections=100)
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class Proxy:
    """The state of one proxy: settings, the Windowers, the upstream client, metrics
    and the visit log."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.windowing = Windowing(settings)
        self.metrics = Metrics()
        self.log: VisitLog | None = None
        self.client: httpx.AsyncClient | None = None
        self.recent = RecentVisits(settings.ui_visits) if settings.ui else None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.client = httpx.AsyncClient(
            base_url=self.settings.upstream,
            timeout=UPSTREAM_TIMEOUT,
            limits=UPSTREAM_LIMITS,
            trust_env=False,
        )
        self.log = VisitLog(self.settings.log) if self.settings.log else None
        try:
            yield
        finally:
            await self.client.aclose()
            if self.log is not None:
                self.log.close()

    # -- endpoints -----------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_endpoint(self, request: Request) -> Response:
        if not key_matches(self.settings.client_key, request.headers.get(CLIENT_KEY_HEADER)):
            return _unauthorised(CHAT)
        if request.query_params.get("format") == "json":
            return JSONResponse(self.metrics.to_dict())
        return PlainTextResponse(self.metrics.prometheus(), media_type="text/plain; version=0.0.4")

    async def ui(self, request: Request) -> Response:
        """The inspector's page of the most recent visits (only when enabled)."""
        if not key_matches(self.settings.client_key, request.headers.get(CLIENT_KEY_HEADER)):
            return _unauthorised(CHAT)
        assert self.recent is not None, "the route exists only with [serve] ui = true"
        page = await run_in_threadpool(self.recent.page)  # a long page takes a while
        headers = {"content-security-policy": CONTENT_SECURITY_POLICY, "cache-control": "no-store"}
        return HTMLResponse(page, headers=headers)

    async def forward(self, request: Request) -> Response:
        """Any request: checked, windowed when its route is one of the three, forwarded."""
        started = time.perf_counter()
        path = request.url.path
        shape = ROUTES.get(path.rstrip("/")) if request.method == "POST" else None
        if not key_matches(self.settings.client_key, request.headers.get(CLIENT_KEY_HEADER)):
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
            if outcome.refusal is not None:
                self._finish(path, outcome, None, started)
                return JSONResponse(outcome.refusal, status_code=400)
            raw = outcome.content
            extra = {"x-ctxwindow": header_value(outcome), "x-ctxwindow-visit": uuid.uuid4().hex}
        response = await self._send(request, raw, shape)
        if outcome is not None:
            self._finish(path, outcome, response.status_code, started, extra)
        elif response.status_code >= 400:
            self.metrics.upstream_error(path)
        response.headers.update(extra)
        return response

    # -- the steps -----------------------------------------------------------------
    async def _visit(self, shape: Shape, raw: bytes) -> Outcome:
        """The visit; a bug anywhere in it forwards the body as it came (and says so in
        the log), never a 500."""
        try:
            return await self.windowing.visit(shape, raw)
        except Exception as error:  # a bug of ours or a plugin's: the request still goes
            logger.warning(
                "windowing failed, forwarding untouched: %s: %s", type(error).__name__, error
            )
            return Outcome(raw, "untouched", note=f"windowing failed: {type(error).__name__}")

    async def _send(self, request: Request, content: bytes, shape: Shape | None) -> Response:
        assert self.client is not None, "the app's lifespan opens the upstream client"
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        upstream = self.client.build_request(
            request.method,
            target,
            headers=request_headers(request.headers.items()),
            content=content,
        )
        try:
            answer = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as error:
            message = f"ctxwindow proxy: upstream unreachable: {type(error).__name__}"
            return JSONResponse(
                (shape or CHAT).error_body("upstream_unreachable", message), status_code=502
            )
        return StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            headers=dict(response_headers(answer.headers.multi_items())),
            background=BackgroundTask(answer.aclose),
        )

    def _finish(
        self,
        route: str,
        outcome: Outcome,
        status: int | None,
        started: float,
        extra: dict[str, str] | None = None,
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
            self.log.write(
                partial(visit_entry, time.time(), visit, route, outcome, status, proxy_ms)
            )
        if telemetry.enabled():
            shape = ROUTES.get(route.rstrip("/"), CHAT)
            output = outcome.budget.output if outcome.budget else None
            telemetry.record_span(outcome, shape.provider, self.settings.upstream, output)


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
