"""pytest plugin (entry point ``pytest11``): options and fixtures for the conformance suite.

Kept free of imports beyond pytest so that it costs nothing in projects that never use it.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ctxwindow")
    group.addoption(
        "--ctxwindow-examples",
        type=int,
        default=None,
        help="hypothesis examples per generated-history conformance test (default 40; "
        "env CTXWINDOW_EXAMPLES)",
    )


@pytest.fixture
def ctxwindow_examples(request: pytest.FixtureRequest) -> int:
    """How many generated histories each conformance test runs."""
    import os

    chosen = request.config.getoption("--ctxwindow-examples")
    if chosen is None:
        chosen = int(os.environ.get("CTXWINDOW_EXAMPLES", "40"))
    return int(chosen)


@pytest.fixture
def ctxwindow_check():  # type: ignore[no-untyped-def]
    """The contract check: ``ctxwindow_check(strategy, messages, budget)``."""
    from ctxwindow.testing.checks import check_window

    return check_window
