"""The ``ctxwindow inspect`` page in a real browser: headless Chromium (Debian's
``chromium``) draws it, a screenshot is taken, and the drawn page is checked against
the records: one row per message, one column per strategy, and each cell's bar in its
fate's colour, read both from the browser's computed style and from the PNG's pixels.

Without Chromium (or Pillow, which reads the PNG) the test is skipped, saying how to
install it; with ``CI=true`` it fails instead, so CI cannot skip it silently.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import docs_scripts
import pytest

import ctxwindow
from ctxwindow_serve.inspector import COLOURS

ROOT = Path(__file__).resolve().parents[3]
#: What the page's script-free DOM is measured with: added to a copy of the page only.
PROBE = """<script>
const box = e => {
  const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height];
};
const found = {
  rows: document.querySelectorAll("tr.msg").length,
  columns: [...document.querySelectorAll("th.strategy")].map(e => e.dataset.strategy),
  cells: [...document.querySelectorAll("td.cell[data-action]")].map(td => {
    const bar = td.querySelector(".bar");
    return {column: Number(td.dataset.column), action: td.dataset.action,
            bar: box(bar), cell: box(td),
            colour: getComputedStyle(bar).backgroundColor,
            background: getComputedStyle(td).backgroundColor};
  }),
  height: document.documentElement.scrollHeight,
  width: document.documentElement.scrollWidth,
};
const pre = document.createElement("pre");
pre.id = "probe"; pre.hidden = true; pre.textContent = JSON.stringify(found);
document.body.appendChild(pre);
</script>"""


def _missing(reason: str) -> NoReturn:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def _browser() -> ModuleType:
    """docs_gen/inspect_screenshot.py: the one place that drives Chromium."""
    return docs_scripts.load("inspect_screenshot")


def _rgb(css: str) -> tuple[int, ...]:
    """``rgb(47, 158, 68)`` as (47, 158, 68)."""
    return tuple(int(part) for part in re.findall(r"\d+", css)[:3])


def _hex(colour: str) -> tuple[int, ...]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def _near(pixel: Any, expected: tuple[int, ...], slack: int = 6) -> bool:
    """Whether an RGB pixel is within ``slack`` of ``expected`` on every channel."""
    return all(abs(a - b) <= slack for a, b in zip(pixel[:3], expected, strict=True))


def test_chromium_draws_a_row_per_message_a_column_per_strategy_in_the_right_colours(
    tmp_path: Path,
) -> None:
    browser = _browser()
    chromium = browser.find_chromium()
    if chromium is None:
        _missing(
            "chromium is not installed; install it (Debian/Ubuntu: apt-get install -y chromium)"
        )
    try:
        from PIL import Image
    except ImportError:
        _missing("Pillow is not installed (it reads the screenshot): pip install pillow")
    page = tmp_path / "page.html"
    browser.write_page(page)
    png = tmp_path / "page.png"
    browser.screenshot(chromium, page, png)
    probe = tmp_path / "probe.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
    )
    dom = browser.dump_dom(chromium, probe)
    found: dict[str, Any] = json.loads(
        html.unescape(re.search(r'<pre id="probe" hidden="">(.*?)</pre>', dom, re.S)[1])  # type: ignore[index]
    )

    messages = json.loads(browser.EXAMPLE.read_text(encoding="utf-8"))
    records = [
        ctxwindow.select(messages, budget=browser.BUDGET, strategy=name).record
        for name in browser.STRATEGIES
    ]
    assert found["rows"] == len(messages)
    assert found["columns"] == list(browser.STRATEGIES)
    width, height = browser.SIZE
    assert found["width"] <= width and found["height"] <= height  # all of it is in the PNG
    for index, record in enumerate(records):
        drawn = sorted(cell["action"] for cell in found["cells"] if cell["column"] == index)
        assert drawn == sorted(decision.action for decision in record.decisions)

    image = Image.open(png).convert("RGB")
    assert image.size == (width, height)
    for cell in found["cells"]:
        expected = _hex(COLOURS[cell["action"]])
        assert _rgb(cell["colour"]) == expected
        left, top, bar_width, bar_height = cell["bar"]
        pixel = image.getpixel((int(left + bar_width / 2), int(top + bar_height / 2)))
        assert _near(pixel, expected), (cell, pixel)
        left, top, cell_width, cell_height = cell["cell"]
        corner = image.getpixel((int(left + cell_width) - 4, int(top + cell_height) - 4))
        assert _near(corner, _rgb(cell["background"])), (cell, corner)
        assert not _near(corner, expected, slack=40)  # the tint is not the bar's colour
    assert {cell["action"] for cell in found["cells"]} >= {
        "kept",
        "dropped",
        "summarized",
        "replaced",
    }
