"""Run a package's own tests in isolation (the tutorial's, a scaffolded plugin's).

Test infrastructure of this repository, on pytest's ``pythonpath``: a test module
imports the fixture with ``from package_tests import package_tests``."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest


def _isolated_venv(where: Path) -> Path:
    """A new venv whose ``site-packages`` also reads the running one's (ctxwindow, pytest,
    hypothesis) through a ``.pth`` file; its python. Nothing is installed into the
    environment running the tests."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    Path(site, "_ctxwindow_parent.pth").write_text(
        f"import site; site.addsitedir({parent!r})\n", encoding="utf-8"
    )
    return python


@pytest.fixture
def package_tests(tmp_path: Path) -> Callable[[Path], subprocess.CompletedProcess[str]]:
    """``package_tests(folder)``: install the package (editable, no dependencies) into a
    fresh isolated venv and run its own tests there; the finished process."""

    def run(package: Path) -> subprocess.CompletedProcess[str]:
        python = _isolated_venv(tmp_path / "venv")
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(package)],
            check=True,
        )
        return subprocess.run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(package / "tests")],
            check=False,
            cwd=package,
            capture_output=True,
            text=True,
            timeout=300,
        )

    return run
