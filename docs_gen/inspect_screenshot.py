"""Write docs/img/inspect.png: ``ctxwindow inspect`` on the shipped example
conversation, as headless Chromium draws it.

Also the one place that knows how to drive Chromium from the command line (no
Playwright, no driver): ``plugins/serve/tests/test_inspect_browser.py`` loads this file
for :func:`find_chromium`, :func:`screenshot` and :func:`dump_dom`.
Usage: ``python docs_gen/inspect_screenshot.py`` (needs Debian's ``chromium``, and
``ctxwindow-serve``, ``-fixed``, ``-sliding`` and ``-summarize`` installed; Pillow, when
installed, trims and shrinks the PNG).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "conversation.json"
OUT = ROOT / "docs" / "img" / "inspect.png"
#: What the docs show: three strategies at a budget where each one acts differently.
STRATEGIES = ("fixed", "sliding", "summarize")
BUDGET = 600
#: Wide enough for three columns beside the messages, tall enough for all 26 of them.
SIZE = (1320, 2280)
#: Headless, and quiet on a closed network: no first-run, sync, update or QUIC traffic.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
TIMEOUT = 120


def find_chromium() -> str | None:
    """Chromium's executable: ``$CHROMIUM``, else ``chromium`` (Debian's package) or
    another Chrome on the PATH."""
    given = os.environ.get("CHROMIUM")
    if given:
        return given
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return next((found for name in names if (found := shutil.which(name))), None)


def _run(chromium: str, page: Path, size: tuple[int, int], *action: str) -> str:
    with tempfile.TemporaryDirectory(prefix="ctxwindow-chromium-") as profile:
        done = subprocess.run(
            [
                chromium,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}",
                *action,
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def screenshot(chromium: str, page: Path, png: Path, size: tuple[int, int] = SIZE) -> None:
    """``page`` drawn in a ``size`` window, saved as ``png``."""
    _run(chromium, page, size, f"--screenshot={png.resolve()}")
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot to {png}")


def dump_dom(chromium: str, page: Path, size: tuple[int, int] = SIZE) -> str:
    """``page``'s DOM after loading it in a ``size`` window, as HTML."""
    return _run(chromium, page, size, "--dump-dom")


def write_page(page: Path) -> None:
    """The inspector's page of the shipped example, as the docs show it."""
    strategies = [arg for name in STRATEGIES for arg in ("-s", name)]
    command = ["inspect", str(EXAMPLE), *strategies, "-b", str(BUDGET), "--html", str(page)]
    subprocess.run(
        [sys.executable, "-m", "ctxwindow", *command], check=True, capture_output=True, timeout=300
    )


def main() -> int:
    chromium = find_chromium()
    if chromium is None:
        print("no chromium here: apt-get install -y chromium", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="ctxwindow-inspect-") as folder:
        page = Path(folder) / "inspect.html"
        write_page(page)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        screenshot(chromium, page, OUT)
    _shrink(OUT)
    print(f"wrote {OUT}")
    return 0


def _shrink(png: Path) -> None:
    """With Pillow: the blank window below the page cut off, and the colours reduced
    to 128 (a third of the bytes; the five fates' colours survive, checked by eye)."""
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return
    image = Image.open(png).convert("RGB")
    blank = Image.new("RGB", image.size, image.getpixel((image.width - 1, image.height - 1)))
    box = ImageChops.difference(image, blank).getbbox()
    if box is not None:
        image = image.crop((0, 0, image.width, min(image.height, box[3] + 16)))
    reduced = image.quantize(128, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    reduced.save(png, optimize=True)


if __name__ == "__main__":
    sys.exit(main())
