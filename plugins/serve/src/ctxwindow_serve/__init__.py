"""ctxwindow-serve: ctxwindow as a proxy any app points its base URL at.

``ctxwindow serve --upstream URL`` windows every OpenAI chat completions, Responses and
Anthropic Messages request for a model with a ``[models]`` entry to its context before
forwarding it, streams the answers back chunk by chunk, and passes everything else
through. ``build_app`` gives the ASGI app for a server of your own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ctxwindow
from ctxwindow_serve.settings import ModelEntry, ServeSettings, load_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from starlette.applications import Starlette

__all__ = ["ModelEntry", "ServeSettings", "build_app", "load_settings"]


def build_app(settings: ServeSettings) -> Starlette:
    """The proxy as an ASGI app (see :mod:`ctxwindow_serve.proxy`)."""
    from ctxwindow_serve.proxy import build_app as build  # starlette only when serving

    return build(settings)


@ctxwindow.hookimpl
def register_config_tables(register: Callable[[str, str], None]) -> None:
    """The proxy's tables of ctxwindow.toml, beside the strategy keys it shares with
    ``ctxwindow select``."""
    register("serve", "the proxy: upstream, port, limits")
    register("models", "the proxy: each model's context and token counter")


@ctxwindow.hookimpl
def register_commands(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ctxwindow_serve import commands  # loaded with the command line, not with the kit

    commands.register(cli)
    from ctxwindow_serve import inspect_command  # `ctxwindow inspect`, the inspector's

    inspect_command.register(cli)
