"""The proxy's settings, read from the same ``ctxwindow.toml`` as ``ctxwindow select``:
the strategy keys at the top, the proxy's own under ``[serve]``, and one table per model
under ``[models."NAME"]`` (its context size; a name ending in ``*`` is a prefix).

The ``[serve]`` and ``[models]`` tables are taken out before the rest goes to
``ctxwindow.from_config``, which rejects keys it does not know.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxwindow.errors import ConfigError

#: Bodies above this many bytes are refused with a 413 (32 MiB).
MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_PORT = 8787
DEFAULT_HOST = "127.0.0.1"

_SERVE_KEYS = frozenset(
    {
        "upstream", "max_body_bytes", "require_key_env", "log", "ui", "ui_visits", "histories",
        "max_connections",
    }
)  # fmt: skip
#: Conversations whose histories the proxy remembers, so that each request costs its new
#: messages (``ctxwindow.remember_histories``); an app process's default is 32.
HISTORIES = 1024
_MODEL_KEYS = frozenset({"context", "counter", "output", "reserve"})


@dataclass(frozen=True)
class ModelEntry:
    """What the proxy knows of one model: its context window in tokens, the counter
    that matches its tokenizer (None: the top-level one), the output it assumes when a
    request names none, and the share of the context held back for counting error and
    the chat template."""

    name: str
    context: int
    counter: str | None = None
    output: int = 4096
    reserve: float = 0.02

    @property
    def reserved(self) -> int:
        return math.ceil(self.reserve * self.context)


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``build_app`` needs; built by :func:`load_settings` or directly."""

    upstream: str
    strategy: dict[str, Any] = field(default_factory=lambda: {"strategy": "fixed"})
    models: tuple[ModelEntry, ...] = ()
    max_body_bytes: int = MAX_BODY_BYTES
    client_key: str | None = None
    log: Path | None = None
    ui: bool = False
    ui_visits: int = 50
    histories: int = HISTORIES
    #: Connections open to the upstream at once; None: as many as requests in flight.
    max_connections: int | None = None

    def __post_init__(self) -> None:
        check_upstream(self.upstream)

    def model(self, name: object) -> ModelEntry | None:
        """The entry for ``name``: an exact one, else the longest ``prefix*`` matching."""
        if not isinstance(name, str):
            return None
        best: ModelEntry | None = None
        for entry in self.models:
            if entry.name == name:
                return entry
            prefix = entry.name[:-1] if entry.name.endswith("*") else None
            if prefix is not None and name.startswith(prefix):
                best = entry if best is None or len(entry.name) > len(best.name) else best
        return best

    def __repr__(self) -> str:  # never the client key
        key = "set" if self.client_key else None
        return f"ServeSettings(upstream={self.upstream!r}, models={len(self.models)}, key={key})"


def check_upstream(url: str) -> str:
    """An http(s) URL without credentials in it (they would end up in logs)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"upstream must be an http(s) URL, got {url!r}")
    if parts.username or parts.password:
        raise ConfigError(
            "upstream URL holds credentials; give them to the clients (they are forwarded), "
            "not to the proxy"
        )
    return url


def load_settings(
    config: Mapping[str, Any],
    *,
    upstream: str | None = None,
    require_key: bool = False,
    environ: Mapping[str, str] = os.environ,
) -> ServeSettings:
    """Settings from a parsed config (what ``ctxwindow.load_config`` reads);
    ``upstream`` wins over ``[serve] upstream``. With ``require_key`` the client key is
    read from the environment variable ``[serve] require_key_env`` names."""
    rest = dict(config)
    serve = _table(rest.pop("serve", {}), "serve")
    models = _table(rest.pop("models", {}), "models")
    _no_unknown(serve, _SERVE_KEYS, "[serve]")
    target = upstream or serve.get("upstream")
    if not target:
        raise ConfigError("no upstream: pass --upstream URL or set [serve] upstream")
    rest.setdefault("strategy", "fixed")
    rest.setdefault("on_timeout", "recent")
    key = None
    key_env = _string(
        serve.get("require_key_env", "CTXWINDOW_PROXY_KEY"), "[serve] require_key_env"
    )
    if require_key:
        key = environ.get(key_env)
        if not key:
            raise ConfigError(f"--require-key: set the client key in the environment as {key_env}")
    log = serve.get("log")
    connections = serve.get("max_connections")
    return ServeSettings(
        upstream=str(target),
        strategy=rest,
        models=tuple(
            _model(name, _table(table, f"models.{name}")) for name, table in models.items()
        ),
        max_body_bytes=_positive(serve.get("max_body_bytes", MAX_BODY_BYTES), "max_body_bytes"),
        client_key=key,
        log=None if log in (None, "") else _log_file(log),
        ui=_boolean(serve.get("ui", False), "ui"),
        ui_visits=_positive(serve.get("ui_visits", 50), "ui_visits"),
        histories=_positive(serve.get("histories", HISTORIES), "histories"),
        max_connections=None if connections is None else _positive(connections, "max_connections"),
    )


def _model(name: str, table: Mapping[str, Any]) -> ModelEntry:
    _no_unknown(table, _MODEL_KEYS, f'[models."{name}"]')
    if "context" not in table:
        raise ConfigError(f'[models."{name}"] needs context = <tokens>')
    reserve = table.get("reserve", 0.02)
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not 0 <= reserve < 1:
        raise ConfigError(f'[models."{name}"] reserve must be a share in [0, 1), got {reserve!r}')
    counter = table.get("counter")
    if counter is not None:
        _string(counter, f'[models."{name}"] counter')
    entry = ModelEntry(
        name=name,
        context=_positive(table["context"], f'models."{name}".context'),
        counter=str(counter) if counter else None,
        output=_positive(table.get("output", 4096), f'models."{name}".output'),
        reserve=float(reserve),
    )
    if entry.output + entry.reserved >= entry.context:  # every request would be refused
        raise ConfigError(
            f'[models."{name}"] leaves no room for a history: output ({entry.output}) and '
            f"reserve ({entry.reserved} tokens) take the whole context ({entry.context}); "
            f"lower output (what a request naming no max tokens is assumed to use)"
        )
    return entry


def _table(value: object, name: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"[{name}] must be a table, got {type(value).__name__}")
    return dict(value)


def _no_unknown(table: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"valid keys: {', '.join(sorted(known))}"
        )


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _boolean(value: object, name: str) -> bool:
    """A TOML true or false: a string such as ``"false"`` would be truthy."""
    if not isinstance(value, bool):
        raise ConfigError(f"[serve] {name} must be true or false (no quotes), got {value!r}")
    return value


def _string(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _log_file(value: object) -> Path:
    """The visit log's path, its folder made and the file opened for appending once
    now: a path the proxy cannot write is a config error, not a traceback at start."""
    path = Path(_string(value, "[serve] log"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("ab").close()
    except OSError as error:
        raise ConfigError(
            f"[serve] log: cannot write {str(path)!r} ({error.strerror or error}); "
            "give a file in a folder the proxy can write to"
        ) from None
    return path
