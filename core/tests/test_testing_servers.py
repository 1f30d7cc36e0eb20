"""The kit's local JSON endpoint: what a real client sends is recorded, and the test's
answer is what the client gets, status and headers included."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from ctxwindow.testing.servers import Reply, Request, chat_completion, local_server


def post(url: str, body: Any, **headers: str) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode()
    sent = urllib.request.Request(url, data, {"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(sent, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def test_a_request_is_recorded_and_answered() -> None:
    def answer(request: Request) -> Any:
        if request.path.startswith("/deny"):
            return Reply({"error": "no"}, 401, {"WWW-Authenticate": "Bearer"})
        return chat_completion("Ann booked Lisbon.", request.body["model"], {"total_tokens": 7})

    with local_server(answer) as server:
        ok = post(f"{server.url}/v1/chat/completions", {"model": "m"}, Authorization="Bearer k")
        denied = post(f"{server.url}/deny/v1", {"model": "m"})
    assert ok[0] == 200
    assert ok[2]["choices"][0]["message"]["content"] == "Ann booked Lisbon."
    assert ok[2]["model"] == "m" and ok[2]["usage"] == {"total_tokens": 7}
    assert denied[0] == 401 and denied[1]["WWW-Authenticate"] == "Bearer"
    assert [request.path for request in server.requests] == ["/v1/chat/completions", "/deny/v1"]
    first = server.requests[0]
    assert first.body == {"model": "m"} and first.headers["authorization"] == "Bearer k"


def test_an_answer_may_wait_while_others_are_served() -> None:
    """Each request in a thread of its own: a slow provider holds one request only."""
    release = threading.Event()

    def answer(request: Request) -> Any:
        if request.path == "/slow":
            release.wait(10)
        return {"path": request.path}

    with local_server(answer) as server:
        slow: list[Any] = []
        waiting = threading.Thread(target=lambda: slow.append(post(f"{server.url}/slow", {})))
        waiting.start()
        assert post(f"{server.url}/fast", {})[2] == {"path": "/fast"}
        release.set()
        waiting.join(10)
    assert slow and slow[0][2] == {"path": "/slow"}


def test_the_server_stops_with_its_block() -> None:
    with local_server(lambda request: {}) as server:
        url = server.url
    with pytest.raises(urllib.error.URLError):
        post(url, {})
