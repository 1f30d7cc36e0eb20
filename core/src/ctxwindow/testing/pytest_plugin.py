"""pytest plugin (entry point ``pytest11``): options and fixtures for the conformance
suite, and ``ctxwindow_register`` to register plugins for one test.

Kept free of imports beyond pytest and pluggy so that it costs nothing in projects that
never use it: ctxwindow itself is imported by the fixtures that need it.
It also counts the generated histories the property tests really ran (not the
``max_examples`` asked for: hypothesis stops early when it runs out of new cases) and
prints the count at the end of the session.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pluggy
import pytest

_hookimpl = pluggy.HookimplMarker("ctxwindow")

#: Generated histories checked this session: (strategy, outcome) -> count.
_GENERATED: Counter[tuple[str, str]] = Counter()


def note_generated(strategy: str, outcome: str) -> None:
    """Count one generated history checked against ``strategy``; ``outcome`` is
    ``"window"`` or the name of the ctxwindow error it rightly raised."""
    _GENERATED[(strategy, outcome)] += 1


def generated_counts() -> dict[tuple[str, str], int]:
    """What :func:`note_generated` counted so far this session."""
    return dict(_GENERATED)


def examples_wanted(config: pytest.Config, default: int) -> int:
    """``--ctxwindow-examples``, else env ``CTXWINDOW_EXAMPLES``, else ``default``."""
    chosen = config.getoption("--ctxwindow-examples", default=None)
    if chosen is None:
        chosen = os.environ.get("CTXWINDOW_EXAMPLES") or default
    return int(chosen)


@pytest.fixture(scope="module")
def ctxwindow_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``XDG_CACHE_HOME`` set to a throwaway folder for a test module (restored after),
    so that strategies that persist by default (semantic's embedding file) write there
    rather than in the user's cache. Use it with
    ``pytestmark = pytest.mark.usefixtures("ctxwindow_cache_home")``."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("cache")
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield folder


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ctxwindow")
    group.addoption(
        "--ctxwindow-examples",
        type=int,
        default=None,
        help="hypothesis examples per generated-history conformance test (default 40; "
        "env CTXWINDOW_EXAMPLES)",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _GENERATED:
        return
    by_strategy: Counter[str] = Counter()
    by_outcome: Counter[str] = Counter()
    for (strategy, outcome), count in _GENERATED.items():
        by_strategy[strategy] += count
        by_outcome[outcome] += count
    total = sum(by_strategy.values())
    strategies = ", ".join(f"{name} {count}" for name, count in sorted(by_strategy.items()))
    outcomes = ", ".join(f"{count} {name}" for name, count in by_outcome.most_common())
    terminalreporter.write_line(
        f"ctxwindow: {total} generated histories checked over {len(by_strategy)} "
        f"strategies ({strategies}; {outcomes})"
    )


@pytest.fixture
def ctxwindow_examples(request: pytest.FixtureRequest) -> int:
    """How many generated histories each conformance test runs."""
    return examples_wanted(request.config, 40)


@pytest.fixture
def ctxwindow_check():  # type: ignore[no-untyped-def]
    """The contract check: ``ctxwindow_check(strategy, messages, budget)``."""
    from ctxwindow.testing.checks import check_window  # see the module docstring

    return check_window


class _Strategies:
    """A plugin that registers the strategy classes it was given."""

    def __init__(self, strategies: Sequence[Any]) -> None:
        self.strategies = tuple(strategies)

    @_hookimpl
    def register_strategies(self, register: Callable[[Any], None]) -> None:
        for strategy in self.strategies:
            register(strategy)


@pytest.fixture
def ctxwindow_register() -> Iterator[Callable[..., str]]:
    """``ctxwindow_register(*things, name=None, distribution=None)``: register, for this
    test only, one plugin object (a module, or an object with ``@ctxwindow.hookimpl``
    hooks) or strategy classes (wrapped in a plugin that registers them); the plugin's
    name. ``distribution`` names it in errors (default: the name)."""
    import ctxwindow  # see the module docstring

    names: list[str] = []

    def register(*things: Any, name: str | None = None, distribution: str | None = None) -> str:
        classes = all(isinstance(thing, type) and hasattr(thing, "choose") for thing in things)
        if things and classes:
            plugin: object = _Strategies(things)
        elif len(things) == 1:
            plugin = things[0]
        else:
            raise TypeError("give one plugin object, or strategy classes")
        chosen = name or distribution or f"test-plugin-{len(names)}"
        ctxwindow.register_plugin(plugin, chosen, distribution)
        names.append(chosen)
        return chosen

    yield register
    for chosen in reversed(names):
        ctxwindow.unregister_plugin(chosen)
