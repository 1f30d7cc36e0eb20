"""Names to things: the strategies and token counters that plugins registered.

Built once from the plugin hooks. A plugin whose hook raises, or that registers
something malformed, is reported and skipped; a name registered twice raises
DuplicateName when that name is asked for, naming both distributions.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxwindow import plugins
from ctxwindow.embedders import Embedder
from ctxwindow.errors import (
    CtxWindowError,
    DuplicateName,
    InvalidOption,
    PluginError,
    UnknownCounter,
    UnknownEmbedder,
    UnknownScorer,
    UnknownStrategy,
    UnknownSummarizer,
)
from ctxwindow.strategy import check_registration, declared_options
from ctxwindow.tokens import CachedCounter, TokenCounter, counter_problem

#: First-party strategies, and the command that installs each.
FIRST_PARTY = {
    "fixed": "pip install ctxwindow-fixed",
    "sliding": "pip install ctxwindow-sliding",
    "summarize": "pip install ctxwindow-summarize",
    "semantic": "pip install ctxwindow-semantic",
    "pipeline": "pip install ctxwindow-pipeline",
    "clear_tool_outputs": "pip install ctxwindow-pipeline",
}
DEFAULT_COUNTER = "approx"
DEFAULT_EMBEDDER = "sentence-transformers"


@dataclass(frozen=True)
class Registered:
    """A named thing and the plugin that registered it."""

    name: str
    target: Any
    plugin: str
    distribution: str


#: The hook through which plugins register each kind of thing.
HOOKS = {
    "strategy": "register_strategies",
    "token counter": "register_token_counters",
    "embedder": "register_embedders",
    "summarizer": "register_summarizers",
    "importance scorer": "register_importance_scorers",
}
#: Where a well-known family comes from, for the error when it is missing.
FAMILY_HINTS = {
    ("embedder", "sentence-transformers"): "pip install ctxwindow-semantic",
    ("summarizer", "extractive"): "pip install ctxwindow-summarize",
    ("summarizer", "openai"): "pip install 'ctxwindow-summarize[openai]'",
    ("importance scorer", "keywords"): "pip install ctxwindow-sliding",
}


@dataclass
class Registry:
    tables: dict[str, dict[str, Registered]] = field(
        default_factory=lambda: {kind: {} for kind in HOOKS}
    )
    conflicts: dict[tuple[str, str], DuplicateName] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def strategies(self) -> dict[str, Registered]:
        return self.tables["strategy"]

    @property
    def counters(self) -> dict[str, Registered]:
        return self.tables["token counter"]

    @property
    def embedders(self) -> dict[str, Registered]:
        return self.tables["embedder"]

    def add(self, kind: str, entry: Registered) -> Registered | None:
        """Add ``entry``; on a clash of names, record it and return the other entry."""
        table = self.tables[kind]
        existing = table.get(entry.name)
        if existing is not None and existing.target is not entry.target:
            self.conflicts[(kind, entry.name)] = DuplicateName(
                kind, entry.name, existing.distribution, entry.distribution
            )
            return existing
        table[entry.name] = entry
        return None

    def conflict(self, kind: str, name: str) -> DuplicateName | None:
        return self.conflicts.get((kind, name))

    def lookup(self, kind: str, name: str) -> Registered | None:
        conflict = self.conflicts.get((kind, name))
        if conflict is not None:
            raise conflict
        return self.tables[kind].get(name)


_lock = threading.RLock()
_registry: Registry | None = None
_instances: dict[tuple[str, str], Any] = {}
#: One lock per spec, so that loading one (a model, say) does not block the others.
_spec_locks: dict[tuple[str, str], threading.Lock] = {}
#: Where get_counter keeps a custom counter's shared CachedCounter: on the counter itself,
#: so the wrapper lives exactly as long as the counter (a table keyed by the counter
#: would keep it alive forever, since the wrapper refers to it).
WRAPPER_ATTRIBUTE = "_ctxwindow_cached_counter"


def forget() -> None:
    global _registry
    with _lock:
        _registry = None
        _instances.clear()
        _spec_locks.clear()


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
    built.problems.extend(host.problems)
    for kind, hook_name in HOOKS.items():
        for impl in reversed(getattr(manager.hook, hook_name).get_hookimpls()):
            info = host.plugins.get(impl.plugin_name)
            distribution = info.distribution if info else impl.plugin_name
            register = _registrar(built, kind, info, distribution)
            try:
                impl.function(register)
            except Exception as error:  # one plugin's failure must not hide the others
                problem = f"{hook_name} raised {type(error).__name__}: {error}"
                built.problems.append(f"{distribution}: {problem}")
                if info is not None:
                    info.error = problem
    return built


def _registrar(
    built: Registry, kind: str, info: plugins.PluginInfo | None, distribution: str
) -> Callable[..., None]:
    """The ``register`` callable one plugin's hook receives."""
    plugin = info.name if info else distribution

    def register(*args: Any) -> None:
        entry = _entry(kind, args, plugin, distribution)
        problem = (
            check_registration(entry.target) if kind == "strategy" else _family_problem(kind, entry)
        )
        if problem:
            built.problems.append(f"{distribution}: {problem}")
            _note(info, problem)
            return
        other = built.add(kind, entry)
        if other is not None:  # the name is unusable until one of them goes: say so
            clash = str(built.conflicts[(kind, entry.name)])
            built.problems.append(f"{distribution}: {clash}")
            _note(info, clash)
            _note(plugins.host().plugins.get(other.plugin), clash)

    return register


def _note(info: plugins.PluginInfo | None, problem: str) -> None:
    if info is not None and problem not in (info.error or ""):
        info.error = problem if info.error is None else f"{info.error}; {problem}"


def _entry(kind: str, args: tuple[Any, ...], plugin: str, distribution: str) -> Registered:
    if kind == "strategy":
        target = args[0] if args else None
        return Registered(getattr(target, "name", repr(target)), target, plugin, distribution)
    name, factory = (*args, None, None)[:2]
    return Registered(str(name), factory, plugin, distribution)


def _family_problem(kind: str, entry: Registered) -> str | None:
    if not entry.name or ":" in entry.name or not callable(entry.target):
        return f"{kind} {entry.name!r}: register a name without ':' and a factory"
    return None


def family_member(
    kind: str,
    spec: str,
    unknown: type[Exception],
    examples: str,
    wrap: Callable[[Any], Any] = lambda made: made,
) -> Any:
    """The shared instance for ``spec`` ("family" or "family:argument") of ``kind``.

    Made once per spec and shared, so a counter's cache or an embedder's loaded model
    serves every strategy that names it.
    """
    made = _instances.get((kind, spec))
    if made is not None:
        return made
    family, _, argument = spec.partition(":")
    current = registry()
    entry = current.lookup(kind, family)
    if entry is None:
        hint = FAMILY_HINTS.get((kind, family))
        available = ", ".join(sorted(current.tables[kind])) or "none installed"
        raise unknown(
            f"unknown {kind} {spec!r}; available: {available} (for example {examples})"
            + (f"; {family!r} comes with `{hint}`" if hint else "")
        )
    key = (kind, spec)
    with _lock:
        spec_lock = _spec_locks.setdefault(key, threading.Lock())
    with spec_lock:  # not the registry lock: a factory may take long to load a model
        made = _instances.get(key)
        if made is None:
            made = _make(kind, spec, entry, argument or None)
            try:
                made = wrap(made)
            except InvalidOption as error:  # the factory made something unusable
                raise PluginError(
                    f"{kind} {spec!r} from distribution {entry.distribution!r}: {error}"
                ) from None
            _instances[key] = made
    return made


def _make(kind: str, spec: str, entry: Registered, argument: str | None) -> Any:
    try:
        return entry.target(argument)
    except CtxWindowError:
        raise
    except Exception as error:
        raise PluginError(
            f"{kind} {spec!r} from distribution {entry.distribution!r} failed to load: "
            f"{type(error).__name__}: {error}"
        ) from error


# -- strategies ----------------------------------------------------------------------
def strategy_entry(name: str) -> Registered:
    """The registration of strategy ``name``, or UnknownStrategy / DuplicateName."""
    if not isinstance(name, str):
        raise InvalidOption(f"strategy must be a name (str), got {type(name).__name__}")
    current = registry()
    conflict = current.conflict("strategy", name)
    if conflict is not None:
        raise conflict
    entry = current.strategies.get(name)
    if entry is None:
        skipped = plugins.host().skipped
        raise UnknownStrategy(
            name,
            sorted(current.strategies),
            FIRST_PARTY.get(name),
            [f"{distribution} ({variable})" for distribution, variable in sorted(skipped.items())],
        )
    return entry


def strategy_names() -> list[str]:
    return sorted(registry().strategies)


def describe_strategies() -> list[dict[str, Any]]:
    """Name, plugin, requires_llm and declared options of each installed strategy;
    ``conflict`` says when another distribution registers the same name (else None)."""
    described = []
    current = registry()
    for name in strategy_names():
        entry = current.strategies[name]
        conflict = current.conflict("strategy", name)
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
                "conflict": None if conflict is None else str(conflict),
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
        return _wrapper_of(spec)
    made: CachedCounter = family_member(
        "token counter",
        spec,
        UnknownCounter,
        "'approx', 'tiktoken:cl100k_base', 'hf:/path/to/tokenizer.json'",
        wrap=CachedCounter,
    )
    return made


def _wrapper_of(counter: Any) -> CachedCounter:
    """The one CachedCounter of a custom counter object, made on first use."""
    problem = counter_problem(counter)
    if problem:
        raise InvalidOption(problem)
    try:
        wrapped = vars(counter).get(WRAPPER_ATTRIBUTE)
    except TypeError:  # no __dict__ (slots): wrapped afresh each time
        wrapped = None
    if isinstance(wrapped, CachedCounter) and wrapped.inner is counter:
        return wrapped
    wrapped = CachedCounter(counter)
    with contextlib.suppress(AttributeError, TypeError):
        object.__setattr__(counter, WRAPPER_ATTRIBUTE, wrapped)
    return wrapped


def counter_names() -> list[str]:
    return sorted(registry().counters)


# -- embedders -----------------------------------------------------------------------
def get_embedder(spec: Embedder | str | None = None) -> Embedder:
    """The shared embedder for ``spec``: 'sentence-transformers' (its default model),
    'sentence-transformers:<model name or local path>', or an Embedder object."""
    if spec is None:
        spec = DEFAULT_EMBEDDER
    if not isinstance(spec, str):
        if not callable(getattr(spec, "embed", None)) or not isinstance(
            getattr(spec, "name", None), str
        ):
            raise InvalidOption(
                f"embedder must be a name or an Embedder (name, embed()), got {type(spec).__name__}"
            )
        return spec
    made: Embedder = family_member(
        "embedder",
        spec,
        UnknownEmbedder,
        "'sentence-transformers', 'sentence-transformers:/path/to/model'",
    )
    return made


# -- summarizers and importance scorers ---------------------------------------------
def get_summarizer(spec: str) -> Any:
    """The shared summarizer for ``spec`` ("name" or "name:argument")."""
    if not isinstance(spec, str):
        raise InvalidOption(f"summarizer must be a name, got {type(spec).__name__}")
    return family_member("summarizer", spec, UnknownSummarizer, "'extractive'")


def get_importance_scorer(spec: str) -> Any:
    """The shared importance scorer for ``spec`` ("name" or "name:argument")."""
    if not isinstance(spec, str):
        raise InvalidOption(f"importance scorer must be a name, got {type(spec).__name__}")
    return family_member("importance scorer", spec, UnknownScorer, "'keywords'")
