"""pytest plugin (entry point ``pytest11``): options and fixtures for the conformance suite.

Kept free of imports beyond pytest so that it costs nothing in projects that never use it.
It also counts the generated histories the property tests really ran (not the
``max_examples`` asked for: hypothesis stops early when it runs out of new cases) and
prints the count at the end of the session.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    from ctxwindow.testing.checks import check_window

    return check_window
