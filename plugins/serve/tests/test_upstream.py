"""The proxy's upstream client adds nothing of its own: the upstream gets the client's
headers and path as sent, the client gets the upstream's headers as sent (every cookie),
no cookie is kept from one client for the next, no redirect is followed; and the proxy
keeps all that on uvicorn's pure-Python parser and loop as on the fast ones."""

from __future__ import annotations

import http.client
import importlib.util
from urllib.parse import urlsplit

import httpx
import pytest

from ctxwindow_serve import runtime


def _raw_get(url: str, target: str, headers: dict[str, str]) -> http.client.HTTPResponse:
    """A GET with exactly these headers (http.client adds Host and nothing else but
    Accept-Encoding: identity, which is skipped here)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    connection.putrequest("GET", target, skip_accept_encoding=True)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.endheaders()
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer


def test_the_upstream_gets_the_clients_headers_and_no_others(proxy, upstream):
    _raw_get(proxy.url, "/v1/models", {"authorization": "Bearer k", "x-trace": "7"})
    seen = upstream.last.headers
    assert seen["authorization"] == "Bearer k"
    assert seen["x-trace"] == "7"
    # nothing the proxy's client would add by itself
    assert not {"user-agent", "accept", "accept-encoding", "content-type", "cookie"} & set(seen)


def test_headers_the_clients_connection_header_names_stop_at_the_proxy(proxy, upstream):
    """RFC 9110 7.6.1: the headers Connection names are for this hop only."""
    hop = {"connection": "keep-alive, X-Client-Hop", "x-client-hop": "1", "x-trace": "7"}
    _raw_get(proxy.url, "/v1/models", hop)
    seen = upstream.last.headers
    assert seen["x-trace"] == "7"
    assert "x-client-hop" not in seen
    assert "client-hop" not in seen.get("connection", "").lower()


def test_headers_the_upstreams_connection_header_names_stop_at_the_proxy(proxy, upstream):
    answer = _raw_get(proxy.url, "/hop", {})
    assert answer.headers["x-upstream-kept"] == "1"
    assert "x-upstream-hop" not in answer.headers
    assert "upstream-hop" not in (answer.headers["connection"] or "").lower()


def test_the_path_and_query_go_as_the_client_encoded_them(proxy, upstream):
    _raw_get(proxy.url, "/v1/files/a%2Fb%20c?after=x%26y&limit=2", {})
    assert upstream.last.target == "/v1/files/a%2Fb%20c?after=x%26y&limit=2"


def test_an_upstream_path_prefix_is_kept(upstream, run_app):
    from ctxwindow_serve import ServeSettings, build_app

    proxy = run_app(build_app(ServeSettings(upstream=f"{upstream.url}/prefix/")))
    httpx.get(f"{proxy.url}/v1/models?x=1")
    assert upstream.last.target == "/prefix/v1/models?x=1"


def test_an_upstream_query_goes_after_the_path_and_is_kept(upstream, run_app):
    """Azure's ``?api-version=``: the client's path is joined to the upstream's before
    its query, and the client's own query follows the upstream's."""
    from ctxwindow_serve import ServeSettings, build_app

    base = f"{upstream.url}/openai/?api-version=2024-02-01"
    proxy = run_app(build_app(ServeSettings(upstream=base)))
    httpx.get(f"{proxy.url}/v1/models")
    assert upstream.last.target == "/openai/v1/models?api-version=2024-02-01"
    httpx.get(f"{proxy.url}/v1/models?after=x%26y")
    assert upstream.last.target == "/openai/v1/models?api-version=2024-02-01&after=x%26y"


def test_the_answer_has_one_date_and_one_server_header(proxy, upstream):
    """The upstream's Date and Server give way to the proxy's own server's: a response
    may carry one Date only."""
    for path in ("/v1/models", "/cookies"):
        answer = _raw_get(proxy.url, path, {})
        assert len(answer.headers.get_all("date") or []) == 1, path
        assert len(answer.headers.get_all("server") or []) == 1, path


def test_every_cookie_goes_to_its_client_and_no_further(proxy, upstream):
    answer = httpx.get(f"{proxy.url}/cookies")
    assert answer.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2"]
    httpx.get(f"{proxy.url}/v1/models")  # another client, with no cookie of its own
    assert "cookie" not in upstream.last.headers


def test_a_redirect_comes_back_to_the_client(proxy, upstream):
    answer = httpx.get(f"{proxy.url}/moved")
    assert answer.status_code == 307
    assert answer.headers["location"] == "/elsewhere"
    assert [seen.path for seen in upstream.seen] == ["/moved"]


PURE = (runtime.PURE_HTTP, runtime.PURE_LOOP)
FAST = ("httptools", "uvloop")


@pytest.mark.parametrize("server", [PURE, FAST], ids=["pure", "fast"])
def test_windowing_and_streaming_work_on_either_server(server, start_proxy, upstream, make_history):
    if server == FAST and not all(importlib.util.find_spec(name) for name in FAST):
        pytest.skip("ctxwindow-serve[fast] is not installed")
    proxy = start_proxy(server=server)
    upstream.gate.set()
    body = {"model": "small", "messages": make_history(20), "max_tokens": 50, "stream": True}
    with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as answer:
        chunks = list(answer.iter_text())
    assert answer.headers["x-ctxwindow"].startswith("strategy=fixed;")
    assert "data: [DONE]" in "".join(chunks)
    assert len(upstream.last.json()["messages"]) < len(body["messages"])


def test_the_runtime_names_what_serves():
    pure = runtime.describe(pure=True)
    assert pure["http"].startswith("h11")
    assert pure["loop"] == "asyncio"
    assert pure["client"].endswith("(pure Python parser)")
    found = runtime.describe()
    assert found["http"].startswith("httptools" if importlib.util.find_spec("httptools") else "h11")
    assert found["loop"].startswith("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
    assert found["json"].startswith("orjson")
