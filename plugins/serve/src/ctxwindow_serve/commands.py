"""The ``serve`` command, added to ``ctxwindow`` through the ``register_commands`` hook.
Starlette, uvicorn and aiohttp are imported when the command runs, not when the command
line is built."""

from __future__ import annotations

import argparse
import logging
import re
import sys

import ctxwindow
from ctxwindow_serve.settings import DEFAULT_HOST, DEFAULT_PORT

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
#: Messages remembered per history, on average, before the least recent is forgotten.
ITEMS_PER_HISTORY = 1000
#: uvicorn's log levels (``trace`` is its own, below ``debug``).
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
#: A query string in an access-log line: it may hold a credential (``?key=...``).
_QUERY = re.compile(r"\?[^ ]*")
#: uvicorn's loggers that name a request's query: the access log, and at ``trace`` the
#: ASGI messages' log, which prints each request's scope (``query_string`` and all).
_REQUEST_LOGGERS = ("uvicorn.access", "uvicorn.asgi")


def register(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to the ``ctxwindow`` command."""
    serve = cli.add_parser(
        "serve",
        help="a proxy that windows chat requests before they reach the model",
        description="Point an app's base URL at this proxy: POST /v1/chat/completions, "
        "/v1/responses and /v1/messages (Anthropic) are windowed to the model's context "
        '([models."NAME"] context = N in the config) with the configured strategy, then '
        "forwarded to --upstream; every other request passes through. The client's "
        "credentials are forwarded, never logged.",
    )
    serve.add_argument("--upstream", help="the API to forward to (default: [serve] upstream)")
    serve.add_argument("--config", help="ctxwindow.toml (default: ./ctxwindow.toml)")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"(default: {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"(default: {DEFAULT_PORT})")
    serve.add_argument(
        "--require-key",
        action="store_true",
        help="clients must send the key in the environment variable [serve] require_key_env "
        "(default CTXWINDOW_PROXY_KEY) as the x-ctxwindow-key header",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        help="the proxy's and uvicorn's log level (default: info)",
    )
    serve.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ctxwindow_serve.proxy import build_app
    from ctxwindow_serve.settings import load_settings

    config = ctxwindow.load_config(args.config)
    settings = load_settings(config, upstream=args.upstream, require_key=args.require_key)
    if args.host not in _LOOPBACK and settings.client_key is None:
        print(
            f"ctxwindow serve: warning: listening on {args.host} without --require-key: "
            "anyone who can reach it can use the upstream credentials clients send through it",
            file=sys.stderr,
        )
    if not settings.models:
        print(
            'ctxwindow serve: warning: no [models."NAME"] in the config: every request is '
            "forwarded untouched",
            file=sys.stderr,
        )
    # one remembered history per live conversation (the process is the proxy's alone)
    ctxwindow.remember_histories(settings.histories, ITEMS_PER_HISTORY * settings.histories)
    server = uvicorn.Config(
        build_app(settings), host=args.host, port=args.port, log_level=args.log_level
    )  # configures uvicorn's loggers: the filters below go on after
    for name in _REQUEST_LOGGERS:
        logging.getLogger(name).addFilter(redact_query)
    log_to_stderr(uvicorn.config.LOG_LEVELS[args.log_level])
    uvicorn.Server(server).run()
    return 0


def log_to_stderr(level: int) -> None:
    """Show the ``ctxwindow`` loggers' records (a strategy's fallback, an unknown model,
    a failed visit) on stderr: nothing else configures logging in this process."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    logger = logging.getLogger("ctxwindow")
    logger.addHandler(handler)
    logger.setLevel(level)


def redact_query(record: logging.LogRecord) -> bool:
    """Drop the query string from an access-log line, and from a scope the ``trace``
    level prints: credentials sent as ``?key=`` must appear nowhere in the log, as
    headers do not (uvicorn prints those as ``<...>``)."""
    if isinstance(record.args, tuple):
        record.args = tuple(_redacted(arg) for arg in record.args)
    return True


def _redacted(arg: object) -> object:
    """A log argument without a query: a path's cut at ``?``, a scope's emptied."""
    if isinstance(arg, str):
        return _QUERY.sub("?...", arg)
    if isinstance(arg, dict) and arg.get("query_string"):
        return {**arg, "query_string": b"..."}
    return arg
