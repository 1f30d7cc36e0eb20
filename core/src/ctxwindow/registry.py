"""Names to things: the strategies and token counters that plugins registered.

Built once from the plugin hooks. A plugin whose hook raises, or that registers
something malformed, is reported and skipped; a name registered twice raises
DuplicateName when that name is asked for, naming both distributions.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxwindow import plugins
from ctxwindow.errors import DuplicateName, InvalidOption, UnknownCounter, UnknownStrategy
from ctxwindow.strategy import check_registration, declared_options
from ctxwindow.tokens import CachedCounter, TokenCounter

#: First-party strategies, and the command that installs each.
FIRST_PARTY = {
    "fixed": "pip install ctxwindow-fixed",
    "sliding": "pip install ctxwindow-sliding",
    "summarize": "pip install ctxwindow-summarize",
    "semantic": "pip install ctxwindow-semantic",
}
DEFAULT_COUNTER = "approx"


@dataclass(frozen=True)
class Registered:
    """A named thing and the plugin that registered it."""

    name: str
    target: Any
    plugin: str
    distribution: str


@dataclass
class Registry:
    strategies: dict[str, Registered] = field(default_factory=dict)
    counters: dict[str, Registered] = field(default_factory=dict)
    conflicts: dict[tuple[str, str], DuplicateName] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, kind: str, table: dict[str, Registered], entry: Registered) -> None:
        existing = table.get(entry.name)
        if existing is not None and existing.target is not entry.target:
            self.conflicts[(kind, entry.name)] = DuplicateName(
                kind, entry.name, existing.distribution, entry.distribution
            )
            return
        table[entry.name] = entry


_lock = threading.Lock()
_registry: Registry | None = None
_counters: dict[str, CachedCounter] = {}
_wrapped: weakref.WeakKeyDictionary[Any, CachedCounter] = weakref.WeakKeyDictionary()


def forget() -> None:
    global _registry
    with _lock:
        _registry = None
        _counters.clear()


def registry() -> Registry:
    global _registry
    if _registry is None:
        with _lock:
            if _registry is None:
                _registry = _build()
    return _registry


def _build() -> Registry:
    host = plugins.host()
    manager = host.ensure_loaded()
    built = Registry()
    hooks: list[tuple[str, str, dict[str, Registered]]] = [
        ("register_strategies", "strategy", built.strategies),
        ("register_token_counters", "token counter", built.counters),
    ]
    for hook_name, kind, table in hooks:
        for impl in reversed(getattr(manager.hook, hook_name).get_hookimpls()):
            info = host.plugins.get(impl.plugin_name)
            distribution = info.distribution if info else impl.plugin_name
            register = _registrar(built, kind, table, info, distribution)
            try:
                impl.function(register)
            except Exception as error:  # one plugin's failure must not hide the others
                problem = f"{hook_name} raised {type(error).__name__}: {error}"
                built.problems.append(f"{distribution}: {problem}")
                if info is not None:
                    info.error = problem
    return built


def _registrar(
    built: Registry,
    kind: str,
    table: dict[str, Registered],
    info: plugins.PluginInfo | None,
    distribution: str,
) -> Callable[..., None]:
    """The ``register`` callable one plugin's hook receives."""
    plugin = info.name if info else distribution

    def register(*args: Any) -> None:
        entry = _entry(kind, args, plugin, distribution)
        problem = (
            check_registration(entry.target) if kind == "strategy" else _counter_problem(entry)
        )
        if problem:
            built.problems.append(f"{distribution}: {problem}")
            if info is not None:
                info.error = problem if info.error is None else f"{info.error}; {problem}"
        else:
            built.add(kind, table, entry)

    return register


def _entry(kind: str, args: tuple[Any, ...], plugin: str, distribution: str) -> Registered:
    if kind == "strategy":
        target = args[0] if args else None
        return Registered(getattr(target, "name", repr(target)), target, plugin, distribution)
    name, factory = (*args, None, None)[:2]
    return Registered(str(name), factory, plugin, distribution)


def _counter_problem(entry: Registered) -> str | None:
    if not entry.name or ":" in entry.name or not callable(entry.target):
        return f"token counter {entry.name!r}: register a name without ':' and a factory"
    return None


# -- strategies ----------------------------------------------------------------------
def strategy_entry(name: str) -> Registered:
    """The registration of strategy ``name``, or UnknownStrategy / DuplicateName."""
    if not isinstance(name, str):
        raise InvalidOption(f"strategy must be a name (str), got {type(name).__name__}")
    current = registry()
    conflict = current.conflicts.get(("strategy", name))
    if conflict is not None:
        raise conflict
    entry = current.strategies.get(name)
    if entry is None:
        raise UnknownStrategy(name, sorted(current.strategies), FIRST_PARTY.get(name))
    return entry


def strategy_names() -> list[str]:
    return sorted(registry().strategies)


def describe_strategies() -> list[dict[str, Any]]:
    """Name, plugin, requires_llm and declared options of each installed strategy."""
    described = []
    for name in strategy_names():
        entry = registry().strategies[name]
        factory = entry.target
        doc = (factory.__doc__ or "").strip().splitlines()
        described.append(
            {
                "name": name,
                "distribution": entry.distribution,
                "plugin": entry.plugin,
                "requires_llm": bool(getattr(factory, "requires_llm", False)),
                "summary": doc[0] if doc else "",
                "options": [option.describe() for option in declared_options(factory)],
            }
        )
    return described


# -- token counters ------------------------------------------------------------------
def get_counter(spec: TokenCounter | str | None = None) -> CachedCounter:
    """A shared, caching counter for ``spec`` ('approx', 'tiktoken:cl100k_base', ...)."""
    if spec is None:
        spec = DEFAULT_COUNTER
    if isinstance(spec, CachedCounter):
        return spec
    if not isinstance(spec, str):
        if not (
            callable(getattr(spec, "count_message", None))
            and callable(getattr(spec, "count_text", None))
        ):
            raise InvalidOption(
                "counter must be a name such as 'approx' or a TokenCounter, "
                f"got {type(spec).__name__}"
            )
        try:
            wrapped = _wrapped.get(spec)
        except TypeError:
            return CachedCounter(spec)
        if wrapped is None:
            wrapped = CachedCounter(spec)
            _wrapped[spec] = wrapped
        return wrapped
    cached = _counters.get(spec)
    if cached is not None:
        return cached
    family, _, argument = spec.partition(":")
    current = registry()
    conflict = current.conflicts.get(("token counter", family))
    if conflict is not None:
        raise conflict
    entry = current.counters.get(family)
    if entry is None:
        raise UnknownCounter(
            f"unknown token counter {spec!r}; available: {', '.join(sorted(current.counters))} "
            f"(for example 'approx', 'tiktoken:cl100k_base', 'hf:/path/to/tokenizer.json')"
        )
    counter = CachedCounter(entry.target(argument or None))
    with _lock:
        return _counters.setdefault(spec, counter)


def counter_names() -> list[str]:
    return sorted(registry().counters)
