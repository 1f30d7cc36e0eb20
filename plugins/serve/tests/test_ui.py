"""``/ui``: the inspector's page of the proxy's recent visits: off unless enabled (the
path is then the upstream's), bounded, newest first, behind the client key when one is
set, served with a policy that forbids scripts, and never showing a credential."""

from __future__ import annotations

import logging
from html.parser import HTMLParser

import httpx


class Sections(HTMLParser):
    """The page's sections (one per visit) and message rows per section."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "section":
            self.rows.append(0)
        elif tag == "tr" and "msg" in classes and self.rows:
            self.rows[-1] += 1


def chat(proxy, messages, secret="sk-none"):
    answer = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "small", "messages": messages, "max_tokens": 50},
        headers={"authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert answer.is_success, answer.text
    return answer


def test_ui_shows_the_recent_visits_newest_first_and_keeps_only_so_many(
    start_proxy, make_history, secret
):
    proxy = start_proxy(ui=True, ui_visits=2)
    histories = [make_history(turns) for turns in (10, 20, 30)]
    for history in histories:
        chat(proxy, history, secret)
    answer = httpx.get(f"{proxy.url}/ui", timeout=30)
    assert answer.status_code == 200
    assert (
        answer.headers["content-security-policy"] == "default-src 'none'; style-src 'unsafe-inline'"
    )
    assert "<script" not in answer.text
    found = Sections()
    found.feed(answer.text)
    assert found.rows == [len(histories[2]), len(histories[1])]  # the first fell out
    assert secret not in answer.text


def test_ui_needs_the_client_key_when_one_is_set(start_proxy, make_history):
    proxy = start_proxy(ui=True, client_key="proxy-key")
    headers = {"x-ctxwindow-key": "proxy-key"}
    httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "small", "messages": make_history(10), "max_tokens": 50},
        headers=headers,
        timeout=30,
    ).raise_for_status()
    assert httpx.get(f"{proxy.url}/ui", timeout=30).status_code == 401
    assert httpx.get(f"{proxy.url}/ui", headers=headers, timeout=30).status_code == 200


def test_a_browser_is_asked_for_the_client_key_of_the_ui(start_proxy):
    """A browser cannot send the proxy's header when it opens a page: told to by the
    401, it asks for a user name and password, and the key as the password opens it."""
    proxy = start_proxy(ui=True, client_key="proxy-key")
    refused = httpx.get(f"{proxy.url}/ui", timeout=30)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Basic ")
    assert "password" in refused.text
    opened = httpx.get(f"{proxy.url}/ui", auth=("anyone", "proxy-key"), timeout=30)
    assert opened.status_code == 200 and "<html" in opened.text.lower()
    wrong = httpx.get(f"{proxy.url}/ui", auth=("anyone", "not-the-key"), timeout=30)
    assert wrong.status_code == 401
    garbled = httpx.get(f"{proxy.url}/ui", headers={"authorization": "Basic %%%"}, timeout=30)
    assert garbled.status_code == 401


def test_without_ui_the_path_is_the_upstreams(proxy, upstream, make_history):
    chat(proxy, make_history(10))
    answer = httpx.get(f"{proxy.url}/ui", timeout=30)
    assert answer.status_code == 200 and answer.json()["object"] == "list"  # the upstream's
    assert upstream.last.path == "/ui"


def test_a_visit_the_inspector_cannot_draw_gets_a_line_and_one_warning(
    start_proxy, make_history, monkeypatch, caplog
):
    from ctxwindow_serve import ui

    def cannot(*args, **kwargs):
        raise ValueError("odd body")

    proxy = start_proxy(ui=True)
    visit = chat(proxy, make_history(2)).headers["x-ctxwindow-visit"]
    monkeypatch.setattr(ui, "render_section", cannot)
    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        pages = [httpx.get(f"{proxy.url}/ui", timeout=30).text for _ in range(2)]
    assert all(visit in page and "cannot draw this visit (ValueError)" in page for page in pages)
    warned = [r for r in caplog.records if "cannot draw" in r.getMessage()]
    assert len(warned) == 1 and visit in warned[0].getMessage()
