"""The proxy's connections to the upstream: more slow requests than the connection
limit wait for a connection (never a 502 from a busy, healthy upstream), and a client
that gives up before the answer begins ends its upstream request."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from ctxwindow_serve.settings import load_settings

BODY = {"model": "slow", "messages": [{"role": "user", "content": "hi"}]}


async def _post_all(url: str, count: int, delay: float) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as client:
        answers = await asyncio.gather(
            *(client.post(url, json={**BODY, "delay": delay}) for _ in range(count))
        )
    return [answer.status_code for answer in answers]


def test_requests_beyond_the_connection_limit_wait_for_a_connection(start_proxy, upstream):
    proxy = start_proxy(max_connections=2)
    started = time.monotonic()
    statuses = asyncio.run(_post_all(f"{proxy.url}/v1/chat/completions", 6, 0.5))
    assert statuses == [200] * 6
    assert time.monotonic() - started >= 1.4  # three rounds of two: the limit held
    # the wait for a pooled connection is not bounded as a connect would be
    timeout = proxy.app.state.proxy.upstream._session.timeout
    assert timeout.connect is None
    assert timeout.sock_connect is not None


def test_max_connections_is_a_setting():
    config = {"serve": {"upstream": "http://127.0.0.1:1", "max_connections": 8}}
    assert load_settings(config).max_connections == 8
    assert load_settings({"serve": {"upstream": "http://127.0.0.1:1"}}).max_connections is None


def test_a_client_that_gives_up_ends_its_upstream_request(proxy, upstream):
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{proxy.url}/v1/chat/completions", json={**BODY, "delay": 30}, timeout=0.5)
    assert upstream.left.wait(5), "the upstream kept generating for a client that left"
    connector = proxy.app.state.proxy.upstream._session.connector
    deadline = time.monotonic() + 5
    while connector._acquired and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not connector._acquired, "the abandoned request kept its upstream connection"
