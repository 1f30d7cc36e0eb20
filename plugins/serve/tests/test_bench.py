"""The latency benchmark, run small: both arms answer, the SSE arm streams, and the
result names the parts the proxy ran on (here the pure-Python ones, forced)."""

from __future__ import annotations

from ctxwindow_serve import bench


def test_a_small_run_on_the_pure_parts_says_what_it_ran_on():
    result = bench.measure(
        messages=30, requests=3, strategy="fixed", stream=True, warmup=1, pure=True
    )
    assert result["runtime"]["http"].startswith("h11")
    assert result["runtime"]["loop"] == "asyncio"
    assert result["runtime"]["client"].endswith("(pure Python parser)")
    for arm in ("direct", "proxy"):
        assert result[arm]["first_chunk_ms"]["median"] <= result[arm]["total_ms"]["median"]
    assert result["added_total_ms"] == round(
        result["proxy"]["total_ms"]["median"] - result["direct"]["total_ms"]["median"], 3
    )


def test_the_requests_ask_for_a_stream_as_sdks_do():
    """Compact JSON: the bench's upstream streams for direct and proxied requests alike."""
    body = bench._body("m", [bench._message(0)], stream=True)
    assert b'"stream":true' in body
