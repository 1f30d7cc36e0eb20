"""The repository passes its own linter and formatter (what ``nox -s lint`` runs) inside
the test suite too: CI runs the README's test command (``nox -s tests``), and a lint
error once landed unseen (a docstring line over the length limit)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> str:
    """The ``ruff`` beside this Python (the tests session installs it), or on the PATH;
    without it the test is skipped, and fails under ``CI=true``."""
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        reason = "ruff is not installed (pip install ruff; `nox -s tests` installs it)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return found


@pytest.mark.parametrize(
    "args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"]
)
def test_the_repository_passes_ruff(args: list[str]) -> None:
    done = subprocess.run(
        [ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
