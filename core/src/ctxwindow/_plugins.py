"""Plugins: finding and loading them, and the names they register.

One :class:`Plugins` object owns the pluggy manager, the core's own registrations (its
token counters), the plugins the environment blocks, and what each plugin registered
(tox 4's plugin manager is the model). Loading is lazy and happens once.

Each entry point in the ``ctxwindow`` group is loaded in its own try/except, so a
broken plugin is reported (distribution, error) and the others still load; a hook that
raises, or registers something malformed, is reported and skipped; a name registered
twice raises DuplicateName when that name is asked for, naming both distributions. A
plugin that raises SystemExit (calls ``sys.exit()``) fails like one that raises any
other error: only Ctrl-C (KeyboardInterrupt) goes through. The core's own names (its
token counters) always win: a plugin registering one of them is refused and reported.

Importing this module imports none of the machinery's dependencies (pluggy, logging,
importlib.metadata, the hook specifications): the first lookup of a plugin does.

``CTXWINDOW_LOAD_PLUGINS``: comma-separated distribution (or entry-point) names; when
set, only those load (set it empty to load none). ``CTXWINDOW_DISABLE_PLUGINS``: names
that never load (blocked in pluggy). Either takes a distribution's name or an entry
point's; an entry point kept out keeps out those of its distribution that load the
same module, which importing them would import. A name in either that
matches no installed plugin is reported in the problems (a typo there would otherwise
load nothing, or block nothing, silently), and the plugins they keep out are named
when a strategy is not found.

Each plugin's pluggy name (its key in :attr:`Plugins.infos`) is qualified by where it
came from, so that two distributions may use one entry-point name (``questions``, say)
and a name never hides or blocks another plugin, nor the core: ``ctxwindow`` for the
core, ``<distribution>:<entry point>`` for an installed plugin, ``by hand:<name>`` for
one registered by hand. ``ctxwindow plugins`` shows the entry point's (or the given)
name, with the distribution beside it.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ctxwindow import _tokens
from ctxwindow._contract import Strategy, check_registration, declared_options
from ctxwindow._protocols import Embedder, ImportanceScorer, Summarizer
from ctxwindow._tokens import CachedCounter, TokenCounter, absolute_spec, cached
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
    did_you_mean,
)

if TYPE_CHECKING:
    import logging

    import pluggy

ENTRY_POINT_GROUP = "ctxwindow"
LOAD_ENV = "CTXWINDOW_LOAD_PLUGINS"
DISABLE_ENV = "CTXWINDOW_DISABLE_PLUGINS"
CORE_DISTRIBUTION = "ctxwindow"
DEFAULT_COUNTER = "approx"
DEFAULT_EMBEDDER = "sentence-transformers"
#: The hook through which plugins register each kind of thing (``register_commands``,
#: which takes the CLI instead, is called by the CLI).
HOOKS = {
    "strategy": "register_strategies",
    "token counter": "register_token_counters",
    "embedder": "register_embedders",
    "summarizer": "register_summarizers",
    "importance scorer": "register_importance_scorers",
    "request format": "register_request_formats",
    "config table": "register_config_tables",
}
#: The install commands of names that are not installed, by kind (data, not code).
HINTS_FILE = os.path.join(os.path.dirname(__file__), "install_hints.toml")
#: The version ``ctxwindow.__version__`` reports when the core is not installed (run
#: from a source tree without its metadata).
UNKNOWN_VERSION = "0+unknown"

#: Loading and calling plugins; what goes wrong is logged here as well as reported.
LOGGER = "ctxwindow.plugins"
#: What a plugin may raise that is not its own failure: the user's Ctrl-C, a generator
#: being closed. Everything else it raises, SystemExit included, is reported as its
#: failure, so that one plugin calling ``sys.exit()`` cannot end every ctxwindow process.
NOT_A_PLUGIN_FAILURE = (KeyboardInterrupt, GeneratorExit)


@functools.cache
def _logger() -> logging.Logger:
    """The plugins' logger, made when a plugin is first looked up (logging and what it
    imports cost more than the rest of this module). A library logs and lets the
    application configure output: the NullHandler on ``ctxwindow``, in place before any
    plugin is imported, keeps the "last resort" handler from printing warnings."""
    import logging

    logging.getLogger("ctxwindow").addHandler(logging.NullHandler())
    return logging.getLogger(LOGGER)


def _debugging() -> bool:
    """Whether the plugins' logger takes DEBUG records: a failure then logs its traceback."""
    import logging

    return _logger().isEnabledFor(logging.DEBUG)


def _print_traceback() -> None:
    """The traceback of the error being handled, on stderr, for ``CTXWINDOW_DEBUG``."""
    if os.environ.get("CTXWINDOW_DEBUG"):
        import traceback

        traceback.print_exc(file=sys.stderr)


@dataclass
class PluginInfo:
    """One plugin as the host sees it: where it came from and whether it loaded."""

    name: str
    distribution: str
    version: str | None
    module: str | None
    hooks: list[str] = field(default_factory=list)
    error: str | None = None
    #: Whether the error is the plugin's own failure (it did not load, a hook raised or
    #: is never called), not a refusal of one thing it registered (a name another
    #: plugin registered too, a strategy the host rejects): the rest of it still works.
    failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "hooks": self.hooks,
            "error": self.error,
            "failed": self.failed,
        }


@dataclass(frozen=True)
class Registered:
    """A named thing and the plugin that registered it."""

    name: str
    target: Any
    plugin: str
    distribution: str
    #: Registered by the core itself: its names always win over a plugin's.
    core: bool = False
    #: The registering plugin's key in :attr:`Plugins.infos` (its pluggy name).
    key: str = ""


@dataclass
class Registry:
    """What the hooks registered, by kind and name, and what went wrong."""

    tables: dict[str, dict[str, Registered]] = field(
        default_factory=lambda: {kind: {} for kind in HOOKS}
    )
    conflicts: dict[tuple[str, str], DuplicateName] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: Registrations refused (malformed, or a name of the core's), by kind: one line
    #: each, "distribution: problem"; the rest of what the plugin registered works.
    refused: dict[str, list[str]] = field(default_factory=dict)

    def refuse(self, kind: str, distribution: str, problem: str) -> None:
        """Record a refused registration, in the problems and by kind, and log it."""
        self.problems.append(f"{distribution}: {problem}")
        self.refused.setdefault(kind, []).append(self.problems[-1])
        _logger().warning("%s", self.problems[-1])

    @property
    def strategies(self) -> dict[str, Registered]:
        return self.tables["strategy"]

    def add(self, kind: str, entry: Registered) -> Registered | None:
        """Add ``entry``; on a clash of names, return the other entry. A clash with the
        core's own name refuses ``entry`` (the core is registered first, and cannot be
        uninstalled or blocked); a clash between plugins is recorded as a conflict."""
        table = self.tables[kind]
        existing = table.get(entry.name)
        if existing is None or existing.target is entry.target:
            table[entry.name] = entry
            return None
        if not existing.core:
            self.conflicts[(kind, entry.name)] = DuplicateName(
                kind, entry.name, existing.distribution, entry.distribution
            )
        return existing

    def claimants(self, kind: str, name: str) -> list[str]:
        """The distributions that registered ``name``, sorted: two when they clash."""
        conflict = self.conflicts.get((kind, name))
        if conflict is not None:
            return sorted({conflict.first, conflict.second})
        entry = self.tables[kind].get(name)
        return [] if entry is None else [entry.distribution]

    def lookup(self, kind: str, name: str) -> Registered | None:
        conflict = self.conflicts.get((kind, name))
        if conflict is not None:
            raise conflict
        return self.tables[kind].get(name)


#: The prefix of the key of a plugin registered by hand: a distribution's name has no
#: space, so it is never an installed plugin's key, nor the core's.
BY_HAND = "by hand:"


def entry_point_key(distribution: str, entry_point: str) -> str:
    """The key (pluggy name) of an installed plugin: qualified by its distribution, so
    that two distributions' entry points of one name are two plugins."""
    return f"{distribution}:{entry_point}"


class PluginTable(dict[str, "PluginInfo"]):
    """The plugins by key; a plugin is also found by the name shown for it (its entry
    point's) when no other plugin shows that name."""

    def __missing__(self, name: str) -> PluginInfo:
        found = [info for info in self.values() if info.name == name]
        if len(found) != 1:
            raise KeyError(name)
        return found[0]


def normalize(name: str) -> str:
    """PEP 503 normalization, so 'My_Plugin.Name' names 'my-plugin-name'."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def _names_from_env(variable: str) -> set[str] | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    return {normalize(part) for part in value.split(",") if part.strip()}


class Plugins:
    """The plugin manager, what loading it found, and what the plugins registered."""

    def __init__(self) -> None:
        self._manager: pluggy.PluginManager | None = None
        self.infos: dict[str, PluginInfo] = PluginTable()
        #: Installed distributions the environment kept from loading, with the variable.
        self.skipped: dict[str, str] = {}
        #: Problems with the environment itself (names that match no plugin).
        self.problems: list[str] = []
        #: What went wrong calling the hooks that are not registrations, by plugin.
        self.call_problems: dict[tuple[str, str], str] = {}
        #: Plugins that failed to load, or whose hooks are wrong, by key: "distribution:
        #: problem" (their PluginInfo says it too).
        self.load_problems: dict[str, str] = {}
        #: Plugins registered by hand (name -> plugin, distribution): kept on reload.
        self.by_hand: dict[str, tuple[object, str]] = {}
        self._loaded = False
        self._lock = threading.RLock()
        self._registry: Registry | None = None
        self._instances: dict[tuple[str, str], Any] = {}
        #: One lock per spec, so that loading one (a model, say) does not block the others.
        self._spec_locks: dict[tuple[str, str], threading.Lock] = {}

    # -- loading ---------------------------------------------------------------------
    @property
    def manager(self) -> pluggy.PluginManager:
        """The pluggy manager with the hook specifications, made on first use."""
        if self._manager is None:
            with self._lock:
                if self._manager is None:
                    self._manager = _new_manager()
        return self._manager

    def loaded(self) -> pluggy.PluginManager:
        """The manager with the core's and every allowed plugin's hooks registered."""
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    _logger()  # its NullHandler first: plugins log under "ctxwindow"
                    version = _version(CORE_DISTRIBUTION)
                    self._add(_tokens, CORE_DISTRIBUTION, CORE_DISTRIBUTION, version)
                    self._load_entry_points()
                    for name, (plugin, distribution) in self.by_hand.items():
                        self._add(plugin, name, distribution, None, BY_HAND + name)
                    self._loaded = True
        return self.manager

    def _load_entry_points(self) -> None:
        """Load each installed entry point the environment does not keep out (by its
        distribution's name or its own). One kept out keeps out the others of its
        distribution that load the same module, which importing them would import; a
        distribution is reported kept out when all its entry points are."""
        allowed = _names_from_env(LOAD_ENV)
        blocked = _names_from_env(DISABLE_ENV) or set()
        known = {normalize(CORE_DISTRIBUTION)}
        installed: set[str] = set()
        for distribution, entry_points in _entry_points_by_distribution().items():
            known |= {normalize(distribution), *(normalize(ep.name) for ep in entry_points)}
            installed.add(distribution)
            kept_out = _kept_out(distribution, entry_points, allowed, blocked)
            for entry_point in entry_points:
                if entry_point.name in kept_out:  # never imported; only this one blocked
                    self.manager.set_blocked(entry_point_key(distribution, entry_point.name))
                else:
                    self._load(entry_point, distribution)
            if kept_out and len(kept_out) == len(entry_points):
                self.skipped[distribution] = next(iter(kept_out.values()))
        for variable, wanted in ((LOAD_ENV, allowed or set()), (DISABLE_ENV, blocked)):
            unknown = sorted(wanted - known)
            if unknown:
                self.problems.append(
                    f"{variable} names {', '.join(map(repr, unknown))}, which no installed "
                    f"plugin matches; installed: {', '.join(sorted(installed)) or 'none'}"
                )
                _logger().warning("%s", self.problems[-1])

    def _load(self, entry_point: Any, distribution: str) -> None:
        """Import one entry point and register its hooks; a failure, SystemExit
        included, is recorded as that plugin's and the others still load."""
        version = entry_point.dist.version if entry_point.dist is not None else None
        key = entry_point_key(distribution, entry_point.name)
        try:
            module = entry_point.load()
            self._add(module, entry_point.name, distribution, version, key)
        except NOT_A_PLUGIN_FAILURE:
            raise
        except BaseException as error:  # a broken plugin must not take the host down
            self.infos[key] = PluginInfo(
                name=entry_point.name,
                distribution=distribution,
                version=version,
                module=entry_point.value,
                error=_failure(error),
                failed=True,
            )
            self.load_problems[key] = f"{distribution}: failed to load: {self.infos[key].error}"
            _logger().warning(
                "plugin %r from distribution %r failed to load: %s",
                entry_point.name,
                distribution,
                self.infos[key].error,
                exc_info=_debugging(),
            )
            _print_traceback()

    def _add(
        self, module: Any, name: str, distribution: str, version: str | None, key: str = ""
    ) -> None:
        """Register ``module`` under ``key`` (default: ``name``, the core's), shown as
        ``name``; a module registered already (under another key) is not registered twice."""
        key = key or name
        if self.manager.is_registered(module) or self.manager.has_plugin(key):
            return
        self.manager.register(module, name=key)
        hooks = sorted(caller.name for caller in self.manager.get_hookcallers(module) or [])
        problem = _hook_problem(self.manager, module, hooks)
        self.infos[key] = PluginInfo(
            name=name,
            distribution=distribution,
            version=version,
            module=getattr(module, "__name__", None),
            hooks=hooks,
            error=problem,
            failed=problem is not None,
        )
        if problem:
            self.load_problems[key] = f"{distribution}: {problem}"
            _logger().warning("plugin %r from distribution %r: %s", name, distribution, problem)

    def register(self, plugin: object, name: str, distribution: str | None = None) -> None:
        """Register a plugin object by hand (an app's own plugin, or a test's)."""
        self.loaded()
        with self._lock:
            self.by_hand[name] = (plugin, distribution or name)
            self._add(plugin, name, distribution or name, None, BY_HAND + name)
            self.forget()

    def unregister(self, name: str) -> None:
        """Remove the plugin registered by hand as ``name``; when none was, the installed
        plugins whose entry point (or key) is ``name``. A name not registered is no error."""
        self.loaded()
        with self._lock:
            if name in self.by_hand:
                keys = [BY_HAND + name]
            else:
                keys = [
                    key
                    for key, info in self.infos.items()
                    if name in (key, info.name) and key != CORE_DISTRIBUTION
                ]
            for key in keys:
                if self.manager.has_plugin(key):
                    self.manager.unregister(name=key)
                self.infos.pop(key, None)
                self.load_problems.pop(key, None)
            self.by_hand.pop(name, None)
            self.forget()

    def forget(self) -> None:
        """Forget what the hooks registered; the next lookup calls them again."""
        with self._lock:
            self._registry = None
            self._instances.clear()
            self._spec_locks.clear()

    # -- what the hooks registered ---------------------------------------------------
    def registry(self) -> Registry:
        built = self._registry
        if built is None:
            with self._lock:
                if self._registry is None:
                    self._registry = self._build()
                built = self._registry
        return built

    def _build(self) -> Registry:
        manager = self.loaded()
        built = Registry()
        built.problems.extend(self.problems)
        for kind, hook_name in HOOKS.items():
            for impl in _core_first(getattr(manager.hook, hook_name).get_hookimpls()):
                info = self.infos.get(impl.plugin_name)
                distribution = info.distribution if info else impl.plugin_name
                register = self._registrar(
                    built, kind, info, distribution, impl.plugin_name, core=_is_core(impl)
                )
                problem, returned = _call_hook(hook_name, impl.function, register)
                problem = problem or _returned_problem(hook_name, returned)
                if problem:
                    built.problems.append(f"{distribution}: {problem}")
                    _logger().warning("%s", built.problems[-1])
                    _note(info, problem, failed=True)
        return built

    def _registrar(
        self,
        built: Registry,
        kind: str,
        info: PluginInfo | None,
        distribution: str,
        key: str,
        core: bool = False,
    ) -> Callable[..., None]:
        """The ``register`` callable one plugin's hook receives (``core``: the core's)."""
        plugin = info.name if info else distribution

        def register(*args: Any) -> None:
            entry = _entry(kind, args, plugin, distribution, core, key)
            if kind == "strategy" and len(args) != 1:  # as the other hooks' (name, factory)
                problem: str | None = _strategy_arguments_problem(args)
            elif kind == "strategy":
                problem = _registration_problem(entry.target)
            else:
                problem = _family_problem(kind, entry)
            if problem:
                built.refuse(kind, distribution, problem)
                _note(info, problem)
                return
            other = built.add(kind, entry)
            if other is None:
                return
            if other.core:  # refused: the core's name stays the core's
                problem = _core_name_problem(kind, entry.name)
                built.refuse(kind, distribution, problem)
                _note(info, problem)
                return
            clash = str(built.conflicts[(kind, entry.name)])  # unusable until one goes
            built.problems.append(f"{distribution}: {clash}")
            _logger().warning("%s", built.problems[-1])
            _note(info, clash)
            _note(self.infos.get(other.key), clash)

        return register

    def call_each(
        self,
        hook_name: str,
        *args: Any,
        after_each: Callable[[str, str | None], None] | None = None,
    ) -> None:
        """Call one hook's implementations one by one with ``args``: one that raises is
        reported on its plugin and the others still run. ``after_each(distribution,
        problem)`` is called after each, so the caller can tell what each one did."""
        for impl in reversed(getattr(self.loaded().hook, hook_name).get_hookimpls()):
            problem = _call(hook_name, impl.function, *args)
            info = self.infos.get(impl.plugin_name)
            distribution = info.distribution if info else impl.plugin_name
            if after_each is not None:
                after_each(distribution, problem)
            if problem:
                self.call_problems[(hook_name, distribution)] = f"{distribution}: {problem}"
                _logger().warning("%s", self.call_problems[(hook_name, distribution)])
                _note(info, problem, failed=True)

    def member(
        self,
        kind: str,
        spec: str,
        unknown: type[Exception],
        examples: str,
        wrap: Callable[[Any], Any] = lambda made: made,
    ) -> Any:
        """The shared instance for ``spec`` ("family" or "family:argument") of ``kind``.

        Made once per spec and shared, so a counter's cache or an embedder's loaded
        model serves every strategy that names it.
        """
        key = (kind, spec)
        made = self._instances.get(key)
        if made is not None:
            return made
        family, _, argument = spec.partition(":")
        current = self.registry()
        entry = current.lookup(kind, family)
        if entry is None:
            hint = install_hint(kind, family)
            available = ", ".join(sorted(current.tables[kind])) or "none installed"
            raise unknown(
                f"unknown {kind} {spec!r}; available: {available} (for example {examples})"
                + (f"; {family!r} comes with `{hint}`" if hint else "")
                + did_you_mean(family, [*current.tables[kind], *_hints().get(kind, {})])
            )
        with self._lock:
            spec_lock = self._spec_locks.setdefault(key, threading.Lock())
        with spec_lock:  # not the plugins' lock: a factory may take long to load a model
            made = self._instances.get(key)
            if made is None:
                made = _make(kind, spec, entry, argument or None)
                try:
                    made = wrap(made)
                except InvalidOption as error:  # the factory made something unusable
                    raise PluginError(
                        f"{kind} {spec!r} from distribution {entry.distribution!r}: {error}"
                    ) from None
                self._instances[key] = made
        return made


def _registration_problem(factory: Any) -> str | None:
    """:func:`check_registration`, guarded: a strategy whose declaration makes the check
    itself raise is refused, and the plugin's other strategies still register."""
    try:
        return check_registration(factory)
    except NOT_A_PLUGIN_FAILURE:
        raise
    except Exception as error:
        name = getattr(factory, "name", None) or getattr(factory, "__name__", repr(factory))
        return (
            f"strategy {name!r}: checking its declaration raised {type(error).__name__}: "
            f"{error}; fix its name, option_specs and other class attributes"
        )


def _hook_problem(manager: pluggy.PluginManager, plugin: object, hooks: list[str]) -> str | None:
    """A plugin's hook that is never called: in a submodule the plugin's package does not
    import, marked ``@hookimpl`` under a name that is no ctxwindow hook (pluggy keeps
    it, unverified), or named as a hook but not marked (pluggy passes it over). Either
    way the plugin registers nothing through it."""
    specified = {name for name, caller in vars(manager.hook).items() if caller.has_spec()}
    if not hooks:
        elsewhere = _hooks_elsewhere(plugin)
        if elsewhere:
            return _no_hooks_problem(plugin, elsewhere)
    for name in hooks:
        if name not in specified:
            return (
                f"hook {name!r} is not a ctxwindow hook{did_you_mean(name, specified)} "
                f"(it is never called)"
            )
    for name in sorted(specified - set(hooks)):
        if callable(getattr(plugin, name, None)):
            return f"{name}() is not marked @ctxwindow.hookimpl, so it is never called"
    return None


#: The most files of a hookless plugin's package read for hooks it does not import.
MOST_FILES_READ = 200


def _hooks_elsewhere(plugin: object) -> list[str]:
    """The submodules of a package with no ctxwindow hook that mark a function with
    ``hookimpl``: an entry point naming the package when its hooks live in a submodule
    it does not import. A package with no hook anywhere (a library listed only for its
    version) has none."""
    from pathlib import Path  # here: `import ctxwindow` does without it

    package = getattr(plugin, "__name__", None)
    folders = getattr(plugin, "__path__", None)
    if not isinstance(package, str) or not folders:
        return []
    found: list[str] = []
    for folder in list(folders)[:1]:
        for at, path in enumerate(sorted(Path(folder).rglob("*.py"))):
            if at >= MOST_FILES_READ:
                break
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "hookimpl" in text and path.name != "__init__.py":
                parts = path.relative_to(folder).with_suffix("").parts
                found.append(".".join((package, *parts)))
    return found


def _no_hooks_problem(plugin: object, elsewhere: list[str]) -> str:
    """What to do about a package with no ctxwindow hook whose submodules have some."""
    module = getattr(plugin, "__name__", None) or type(plugin).__name__
    return (
        f"it has no ctxwindow hook, so it registers nothing: {module!r} does not import "
        f"{', '.join(map(repr, elsewhere))}, where @ctxwindow.hookimpl functions are; point "
        f"the entry point at that module (e.g. '{elsewhere[0]}'), or import its hooks in "
        f"{module!r}"
    )


def _call(hook_name: str, hook: Callable[..., Any], *args: Any) -> str | None:
    """Call one plugin's hook; what went wrong, or None."""
    return _call_hook(hook_name, hook, *args)[0]


def _call_hook(hook_name: str, hook: Callable[..., Any], *args: Any) -> tuple[str | None, Any]:
    """Call one plugin's hook; what went wrong (or None) and what it returned. One
    plugin's failure must not hide the others', nor end the process (SystemExit is its
    failure too)."""
    try:
        return None, hook(*args)
    except NOT_A_PLUGIN_FAILURE:
        raise
    except BaseException as error:
        _print_traceback()
        return f"{hook_name} raised {_failure(error)}", None


def _returned_problem(hook_name: str, returned: Any) -> str | None:
    """A registration hook that returned what it meant to register (as pytest's or
    llm's hooks do): the host ignores the value, so nothing registered. What a hook
    returns from calling register() (None, or a list of Nones) is no problem."""
    if returned is None:
        return None
    if isinstance(returned, (list, tuple)) and all(item is None for item in returned):
        return None
    shown = repr(returned)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return (
        f"{hook_name} returned {shown}, which the host ignores: call register(...) for "
        f"each thing instead of returning it (nothing it returned is registered)"
    )


def _failure(error: BaseException) -> str:
    """A plugin's error in one line; SystemExit says what the plugin did, since its
    message alone (an exit code, say) would not."""
    said = f"{type(error).__name__}: {error}"
    if isinstance(error, SystemExit):
        return f"{said} (the plugin called sys.exit(); a plugin must raise an error instead)"
    return said


def _core_first(impls: list[Any]) -> list[Any]:
    """The hook implementations in calling order, the core's first: its names are
    registered before any plugin's can claim them."""
    calling_order = list(reversed(impls))  # pluggy calls the last registered first
    return sorted(calling_order, key=lambda impl: not _is_core(impl))


def _is_core(impl: Any) -> bool:
    """Whether a hook implementation is the core's own (its token counters)."""
    return impl.plugin is _tokens


def _core_name_problem(kind: str, name: str) -> str:
    return (
        f"{kind} {name!r} is a name of the core (ctxwindow), which always keeps it: this "
        f"registration is ignored; register yours under another name"
    )


def _entry_points_by_distribution() -> dict[str, list[Any]]:
    """The ``ctxwindow`` entry points, grouped by the distribution that declares them."""
    grouped: dict[str, list[Any]] = {}
    for entry_point in _metadata().entry_points(group=ENTRY_POINT_GROUP):
        dist = entry_point.dist
        distribution = dist.metadata["Name"] if dist is not None else entry_point.name
        grouped.setdefault(distribution, []).append(entry_point)
    return grouped


def _kept_out(
    distribution: str, entry_points: list[Any], allowed: set[str] | None, blocked: set[str]
) -> dict[str, str]:
    """The entry points of ``distribution`` the environment keeps out, with the variable
    that does, going by the distribution's name and each one's. Entry points that load
    one module go together (importing one imports it for all): blocked if any of them
    is blocked, else loaded if any of them is let in."""
    variables = {
        ep.name: _keeping_out({normalize(distribution), normalize(ep.name)}, allowed, blocked)
        for ep in entry_points
    }
    disabled = {_module_of(ep) for ep in entry_points if variables[ep.name] == DISABLE_ENV}
    let_in = {_module_of(ep) for ep in entry_points if variables[ep.name] is None}
    kept: dict[str, str] = {}
    for entry_point in entry_points:
        variable, module = variables[entry_point.name], _module_of(entry_point)
        if module in disabled:
            kept[entry_point.name] = DISABLE_ENV
        elif variable is not None and module not in let_in:
            kept[entry_point.name] = variable
    return kept


def _module_of(entry_point: Any) -> str:
    """The module an entry point imports (``module:attribute`` -> ``module``)."""
    value: str = entry_point.value
    return value.partition(":")[0].strip()


def _keeping_out(names: set[str], allowed: set[str] | None, blocked: set[str]) -> str | None:
    """The variable that keeps out an entry point going by ``names``, or None."""
    if names & blocked:
        return DISABLE_ENV
    if allowed is not None and not names & allowed:
        return LOAD_ENV
    return None


def _note(info: PluginInfo | None, problem: str, failed: bool = False) -> None:
    """Add ``problem`` to the plugin's error; ``failed``: the plugin's own failure."""
    if info is None:
        return
    info.failed = info.failed or failed
    if problem not in (info.error or ""):
        info.error = problem if info.error is None else f"{info.error}; {problem}"


def _entry(
    kind: str,
    args: tuple[Any, ...],
    plugin: str,
    distribution: str,
    core: bool = False,
    key: str = "",
) -> Registered:
    if kind == "strategy":
        target = args[0] if args else None
        name = getattr(target, "name", repr(target))
        return Registered(name, target, plugin, distribution, core, key)
    name, factory = (*args, None, None)[:2]
    return Registered(str(name), factory, plugin, distribution, core, key)


def _strategy_arguments_problem(args: tuple[Any, ...]) -> str:
    """What is wrong with a register_strategies call given other than one argument (the
    other hooks' register takes a name and a factory; this one, the class alone)."""
    given = ", ".join(getattr(arg, "__name__", None) or repr(arg) for arg in args)
    return (
        f"register_strategies: register() takes one argument, the strategy class (its "
        f"name is the class's `name` attribute); got register({given})"
    )


def _family_problem(kind: str, entry: Registered) -> str | None:
    if kind == "config table":
        if not entry.name or not entry.name.isidentifier() or not isinstance(entry.target, str):
            return (
                f"{kind} {entry.name!r}: register the table's name (letters, digits, '_') "
                "and a description of what it configures"
            )
        return None
    if kind == "request format":
        if not entry.name or not all(
            callable(getattr(entry.target, method, None)) for method in ("recognises", "select")
        ):
            return (
                f"{kind} {entry.name!r}: register a name and an object with recognises() "
                "and select()"
            )
        return None
    if not entry.name or ":" in entry.name or not callable(entry.target):
        return f"{kind} {entry.name!r}: register a name without ':' and a factory"
    return None


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


def _new_manager() -> pluggy.PluginManager:
    """A pluggy manager for the ctxwindow hooks: pluggy and the hook specifications are
    imported here, when plugins are first needed, not by ``import ctxwindow``."""
    import pluggy

    from ctxwindow import hookspecs  # here: only the plugin host needs pluggy

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


def _metadata() -> ModuleType:
    """importlib.metadata, imported on first use: it is a third of what ``import
    ctxwindow`` would cost, and only loading plugins needs it."""
    import importlib.metadata

    return importlib.metadata


def core_version() -> str:
    """The installed core's version, from its distribution's metadata."""
    return _version(CORE_DISTRIBUTION) or UNKNOWN_VERSION


def _version(distribution: str) -> str | None:
    metadata = _metadata()
    try:
        version: str = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    return version


@functools.cache
def _hints() -> dict[str, dict[str, str]]:
    if sys.version_info >= (3, 11):  # read only when a name is missing: a rare error path
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    with open(HINTS_FILE, encoding="utf-8") as file:
        loaded: dict[str, dict[str, str]] = tomllib.loads(file.read())
    return loaded


def install_hint(kind: str, name: str) -> str | None:
    """The command that installs ``name`` (a strategy, an embedder, a command...), from
    the table of known distributions; None when the table does not know it."""
    return _hints().get(kind, {}).get(name)


# -- the current plugins ----------------------------------------------------------------
_current = Plugins()
_current_lock = threading.Lock()


def plugins() -> Plugins:
    return _current


def reload_plugins() -> None:
    """Forget the loaded plugins; the next use loads them again, reading the
    environment variables again (for a long-running process that changed them).
    Plugins registered by hand stay registered."""
    global _current
    _installed_by_module.cache_clear()
    with _current_lock:
        fresh = Plugins()
        fresh.by_hand = dict(_current.by_hand)
        _current = fresh


def register_plugin(plugin: object, name: str, distribution: str | None = None) -> None:
    """Register a plugin module or object by hand (an app's own plugin, or a test's):
    its hooks are called as an installed plugin's are. ``distribution`` names it in
    errors and in ``ctxwindow plugins`` (default: ``name``). ``name`` may be an
    installed entry point's too: the two are separate plugins."""
    plugins().register(plugin, name, distribution)


def unregister_plugin(name: str) -> None:
    """Remove the plugin registered by hand as ``name``; when none was, the installed
    plugins whose entry point is ``name`` (for the rest of the process)."""
    plugins().unregister(name)


def get_plugins() -> list[PluginInfo]:
    """Every plugin found, loaded or not, core first; errors from its hooks included."""
    current = plugins()
    current.registry()  # calling the hooks is what finds a plugin that fails in one
    return sorted(
        current.infos.values(),
        key=lambda p: (p.distribution != CORE_DISTRIBUTION, p.name, p.distribution),
    )


def plugin_problems() -> list[str]:
    """What went wrong finding, loading or calling the plugins, one line each, each
    "distribution: problem" (but for the environment's own: a name in
    ``CTXWINDOW_LOAD_PLUGINS`` that matches no plugin)."""
    registered = registration_problems()  # loads the plugins first
    return [*plugins().load_problems.values(), *registered]


def registration_problems() -> list[str]:
    """:func:`plugin_problems` but for plugins that failed to load or whose hooks are
    wrong: what ``ctxwindow plugins`` lists below its table, whose rows say those."""
    current = plugins()
    return [*current.registry().problems, *current.call_problems.values()]


def distribution_of(obj: object) -> str | None:
    """The distribution that registered ``obj``'s class, else the one that installed it."""
    current = plugins()
    cls = obj if isinstance(obj, type) else type(obj)
    for entry in current.registry().strategies.values():
        if entry.target is cls:
            return entry.distribution
    module = cls.__module__
    top = module.split(".")[0]
    if top == "__main__":  # the running script's: no distribution ships it
        return None
    for plugin in current.infos.values():
        if plugin.module and plugin.module.split(".")[0] == top:
            return plugin.distribution
    found = _installed_by_module().get(top)
    return found[0] if found else None


@functools.cache
def _installed_by_module() -> Mapping[str, list[str]]:
    """The installed distributions by top-level module, read once per process (and
    again after :func:`reload_plugins`): reading it opens every distribution's file
    list, a second or more in a large environment, and each error naming a strategy
    that no plugin registered (a class given to a Windower) asks for it."""
    found: Mapping[str, list[str]] = _metadata().packages_distributions()
    return found


# -- strategies ------------------------------------------------------------------------
def _object_hint(strategy: object) -> str:
    """How to use a strategy object where a name was asked for (``select``'s and
    config's ``strategy``): a natural thing to try."""
    if not (isinstance(getattr(strategy, "name", None), str) and hasattr(strategy, "choose")):
        return ""
    own = " or strategy.select(messages, budget)" if hasattr(strategy, "select") else ""
    return (
        "; to use a strategy object, call ctxwindow.Windower(strategy, budget)"
        f".select(messages){own}"
    )


def strategy_entry(name: str) -> Registered:
    """The registration of strategy ``name``, or UnknownStrategy / DuplicateName."""
    if not isinstance(name, str):
        raise InvalidOption(
            f"strategy must be a name (str), got {type(name).__name__}" + _object_hint(name)
        )
    current = plugins()
    entry = current.registry().lookup("strategy", name)
    if entry is None:
        raise UnknownStrategy(
            name,
            sorted(current.registry().strategies),
            install_hint("strategy", name),
            [f"{dist} ({variable})" for dist, variable in sorted(current.skipped.items())],
            known=sorted(_hints().get("strategy", {})),
            failed=failed_plugins(),
        )
    return entry


def refused_strategies() -> list[str]:
    """The strategy registrations refused ("distribution: problem"), one line each: the
    plugin itself loaded, and its other strategies work."""
    return list(plugins().registry().refused.get("strategy", []))


def failed_plugins() -> list[str]:
    """The plugins that failed (did not load, a hook raised or is never called), one
    line each ("name from distribution: error"), then the strategies refused: what a
    lookup that found nothing should name. A plugin whose only problem is a name another
    also claims is not among them: it loaded, and that name raises DuplicateName."""
    failed = [
        f"{info.name!r} from {info.distribution}: {info.error}"
        for info in get_plugins()
        if info.failed
    ]
    return [*failed, *refused_strategies()]


def strategy_class(name: str) -> Callable[..., Strategy]:
    """The class (or factory) registered as strategy ``name``, not built: what it
    declares (``option_specs``, ``example_options``) without configuring it."""
    target: Callable[..., Strategy] = strategy_entry(name).target
    return target


def get_strategy(name: str, **options: Any) -> Strategy:
    """A strategy instance by name, its options validated."""
    strategy: Strategy = build_strategy(strategy_entry(name), options)
    return strategy


def build_strategy(entry: Registered, options: Mapping[str, Any]) -> Any:
    """The strategy ``entry`` registers, built with ``options``: a ctxwindow error as it
    is; a TypeError or ValueError given options (a plugin rejecting a value its own way)
    as InvalidOption; any other failure, and any failure given no options (which no
    option can have caused: a bug of the plugin's), as the PluginError of its
    distribution."""
    try:
        return entry.target(**options)
    except CtxWindowError:
        raise
    except (TypeError, ValueError) as error:
        if not options:
            raise PluginError(
                f"strategy {entry.name!r} from distribution {entry.distribution!r} failed to "
                f"build with no options given, so the error is the plugin's own (report it "
                f"to {entry.distribution}): {type(error).__name__}: {error}"
            ) from error
        raise InvalidOption(
            f"strategy {entry.name!r} rejected its options: {error} (if they are valid, "
            f"the error is distribution {entry.distribution!r}'s)"
        ) from None
    except Exception as error:
        raise PluginError(
            f"strategy {entry.name!r} from distribution {entry.distribution!r} failed to "
            f"build: {type(error).__name__}: {error}"
        ) from error


def describe_strategies() -> list[dict[str, Any]]:
    """Name, distribution, requires_llm, summary and declared options of each installed
    strategy; ``conflict`` says when another distribution registers the same name, and
    ``claimed_by`` names every distribution that registers it (two on a conflict)."""
    described = []
    current = plugins().registry()
    for name in sorted(current.strategies):
        entry = current.strategies[name]
        conflict = current.conflicts.get(("strategy", name))
        factory = entry.target
        described.append(
            {
                "name": name,
                "distribution": entry.distribution,
                "plugin": entry.plugin,
                "requires_llm": bool(getattr(factory, "requires_llm", False)),
                "summary": _summary(factory.__doc__),
                "options": [option.describe() for option in declared_options(factory)],
                "conflict": None if conflict is None else str(conflict),
                "claimed_by": current.claimants("strategy", name),
            }
        )
    return described


def _summary(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


# -- the other things plugins register ---------------------------------------------------
def get_counter(spec: TokenCounter | str | None = None) -> CachedCounter:
    """A shared, caching counter for ``spec`` ('approx', 'tiktoken:cl100k_base', ...)."""
    if spec is None:
        spec = DEFAULT_COUNTER
    if not isinstance(spec, str):
        return cached(spec)
    made: CachedCounter = plugins().member(
        "token counter",
        absolute_spec(spec),  # a relative hf: path is shared by where it leads
        UnknownCounter,
        "'approx', 'tiktoken:cl100k_base', 'hf:/path/to/tokenizer.json'",
        wrap=CachedCounter,
    )
    return made


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
    made: Embedder = plugins().member(
        "embedder",
        spec,
        UnknownEmbedder,
        "'sentence-transformers', 'sentence-transformers:/path/to/model'",
    )
    return made


def get_summarizer(spec: str) -> Summarizer:
    """The shared summarizer for ``spec`` ("name" or "name:argument"), checked against
    the Summarizer protocol when it is made: a factory that returns something unusable
    fails at configuration, as a PluginError naming its distribution and what the
    object lacks, not with an AttributeError at the first summary."""
    if not isinstance(spec, str):
        raise InvalidOption(f"summarizer must be a name, got {type(spec).__name__}")
    summarizer: Summarizer = plugins().member(
        "summarizer", spec, UnknownSummarizer, "'extractive'", wrap=_usable_summarizer
    )
    return summarizer


def _usable_summarizer(made: Any) -> Any:
    """``made``, if it has what a summarizing strategy uses; else InvalidOption saying
    what is missing (:meth:`Plugins.member` names the factory's distribution)."""
    problems = _summarizer_problems(made)
    if problems:
        raise InvalidOption(
            f"what its factory made ({type(made).__name__}) is not a usable "
            f"ctxwindow.Summarizer: " + "; ".join(problems)
        )
    return made


def _summarizer_problems(summarizer: object) -> list[str]:
    """What ``summarizer`` lacks of the :class:`ctxwindow.Summarizer` protocol, each
    with what to set: a summarizing strategy reads these attributes on every visit."""
    import inspect  # here: `import ctxwindow` does not import it

    problems: list[str] = []
    name = getattr(summarizer, "name", None)
    if not isinstance(name, str) or not name:
        problems.append(
            f"its name must be a non-empty str (the id its summaries are cached under), "
            f"got {name!r}"
        )
    requires_llm = getattr(summarizer, "requires_llm", None)
    if not isinstance(requires_llm, bool):
        problems.append(f"requires_llm must be True or False, got {requires_llm!r}")
    limit = getattr(summarizer, "max_input_tokens", None)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        problems.append(
            f"max_input_tokens must be a positive int (the most input, in tokens, it "
            f"takes in one call), got {limit!r}"
        )
    summarize = getattr(summarizer, "summarize", None)
    if not callable(summarize) or getattr(type(summarizer), "summarize", None) is (
        Summarizer.summarize
    ):
        problems.append("it has no summarize(request) method returning a SummaryResult")
    elif inspect.iscoroutinefunction(summarize):
        problems.append(
            "summarize() is async; it must return a SummaryResult (summarizing strategies "
            "call it synchronously, in a worker thread under aselect); asummarize() is the "
            "optional async one"
        )
    if requires_llm is True:
        missing = [a for a in ("provider", "model") if not getattr(summarizer, a, None)]
        if missing:
            problems.append(
                f"requires_llm is True, so it must name who is billed for its calls: set "
                f"its {' and '.join(missing)} attribute(s) (provider='my-gateway', "
                f"model='gpt-4o-mini', say)"
            )
    return problems


def request_formats() -> list[Registered]:
    """The request body formats plugins registered, by name: the CLI asks each in turn
    whether it recognises a body."""
    table = plugins().registry().tables["request format"]
    return [table[name] for name in sorted(table)]


def config_tables() -> dict[str, str]:
    """The tables of ctxwindow.toml that plugins read, by name, with what each
    configures (``register_config_tables``): the windower leaves them to their plugins."""
    table = plugins().registry().tables["config table"]
    return {name: entry.target for name, entry in sorted(table.items())}


def get_importance_scorer(spec: str) -> ImportanceScorer:
    """The shared importance scorer for ``spec`` ("name" or "name:argument")."""
    if not isinstance(spec, str):
        raise InvalidOption(f"importance scorer must be a name, got {type(spec).__name__}")
    scorer: ImportanceScorer = plugins().member(
        "importance scorer", spec, UnknownScorer, "'keywords'"
    )
    return scorer
