"""Finding and loading plugins: one plugin manager, loaded lazily, once.

Each entry point in the ``ctxwindow`` group is loaded in its own try/except, so a
broken plugin is reported (distribution, error) and the others still load.

``CTXWINDOW_LOAD_PLUGINS``: comma-separated distribution (or entry-point) names; when
set, only those load (set it empty to load none). ``CTXWINDOW_DISABLE_PLUGINS``: names
that never load. A name in either that matches no installed plugin is reported in
``problems`` (a typo there would otherwise load nothing, or block nothing, silently),
and the plugins they keep from loading are named when a strategy is not found.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from ctxwindow import builtins, hookspecs

ENTRY_POINT_GROUP = "ctxwindow"
LOAD_ENV = "CTXWINDOW_LOAD_PLUGINS"
DISABLE_ENV = "CTXWINDOW_DISABLE_PLUGINS"
CORE_DISTRIBUTION = "ctxwindow"


@dataclass
class PluginInfo:
    """One plugin as the host sees it: where it came from and whether it loaded."""

    name: str
    distribution: str
    version: str | None
    module: str | None
    hooks: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "hooks": self.hooks,
            "error": self.error,
        }


def normalize(name: str) -> str:
    """PEP 503 normalization, so 'CtxWindow_Fixed' names 'ctxwindow-fixed'."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def _names_from_env(variable: str) -> set[str] | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    return {normalize(part) for part in value.split(",") if part.strip()}


class PluginHost:
    """The plugin manager and what loading it found."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        #: Installed distributions the environment kept from loading, with the variable.
        self.skipped: dict[str, str] = {}
        #: Problems with the environment itself (names that match no plugin).
        self.problems: list[str] = []
        self._loaded = False
        self._lock = threading.Lock()

    def ensure_loaded(self) -> pluggy.PluginManager:
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    self._register(
                        builtins,
                        "ctxwindow.builtins",
                        CORE_DISTRIBUTION,
                        _version(CORE_DISTRIBUTION),
                    )
                    self._load_entry_points()
                    self._loaded = True
        return self.manager

    def _load_entry_points(self) -> None:
        allowed = _names_from_env(LOAD_ENV)
        blocked = _names_from_env(DISABLE_ENV) or set()
        known = {normalize(CORE_DISTRIBUTION)}
        installed: set[str] = set()
        for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = entry_point.dist
            distribution = dist.metadata["Name"] if dist is not None else entry_point.name
            names = {normalize(distribution), normalize(entry_point.name)}
            known |= names
            installed.add(distribution)
            if names & blocked:
                self.skipped.setdefault(distribution, DISABLE_ENV)
                continue
            if allowed is not None and not names & allowed:
                self.skipped.setdefault(distribution, LOAD_ENV)
                continue
            version = dist.version if dist is not None else None
            try:
                module = entry_point.load()
                self._register(module, entry_point.name, distribution, version)
            except Exception as error:  # a broken plugin must not take the host down
                self.plugins[entry_point.name] = PluginInfo(
                    name=entry_point.name,
                    distribution=distribution,
                    version=version,
                    module=entry_point.value,
                    error=f"{type(error).__name__}: {error}",
                )
                if os.environ.get("CTXWINDOW_DEBUG"):
                    traceback.print_exc(file=sys.stderr)
        for variable, wanted in ((LOAD_ENV, allowed or set()), (DISABLE_ENV, blocked)):
            unknown = sorted(wanted - known)
            if unknown:
                self.problems.append(
                    f"{variable} names {', '.join(map(repr, unknown))}, which no installed "
                    f"plugin matches; installed: {', '.join(sorted(installed)) or 'none'}"
                )

    def _register(self, module: Any, name: str, distribution: str, version: str | None) -> None:
        if self.manager.is_registered(module) or self.manager.has_plugin(name):
            return
        self.manager.register(module, name=name)
        hooks = sorted(caller.name for caller in self.manager.get_hookcallers(module) or [])
        self.plugins[name] = PluginInfo(
            name=name,
            distribution=distribution,
            version=version,
            module=getattr(module, "__name__", None),
            hooks=hooks,
        )

    def register_plugin(
        self, module: ModuleType | object, name: str, distribution: str | None = None
    ) -> None:
        """Register a plugin object by hand (tests, or an app's own plugin)."""
        from ctxwindow import registry

        self.ensure_loaded()
        with self._lock:
            self._register(module, name, distribution or name, None)
        registry.forget()

    def unregister_plugin(self, name: str) -> None:
        from ctxwindow import registry

        self.ensure_loaded()
        with self._lock:
            self.manager.unregister(name=name)
            self.plugins.pop(name, None)
        registry.forget()


_host = PluginHost()
_host_lock = threading.Lock()


def host() -> PluginHost:
    return _host


def reset() -> None:
    """Forget the loaded plugins; the next use loads them again (reads the env again)."""
    global _host
    from ctxwindow import registry

    with _host_lock:
        _host = PluginHost()
    registry.forget()


def get_plugins() -> list[PluginInfo]:
    """Every plugin found, loaded or not, core first; errors from its hooks included."""
    from ctxwindow import registry

    current = host()
    registry.registry()  # calling the hooks is what finds a plugin that fails in one
    return sorted(
        current.plugins.values(), key=lambda p: (p.distribution != CORE_DISTRIBUTION, p.name)
    )


def distribution_of(obj: object) -> str | None:
    """The distribution that registered ``obj``'s class, else the one that installed it."""
    from ctxwindow import registry

    cls = obj if isinstance(obj, type) else type(obj)
    for entry in registry.registry().strategies.values():
        if entry.target is cls:
            return entry.distribution
    module = cls.__module__
    top = module.split(".")[0]
    for plugin in host().plugins.values():
        if plugin.module and plugin.module.split(".")[0] == top:
            return plugin.distribution
    found = metadata.packages_distributions().get(top)
    return found[0] if found else None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
