"""The summary cache: bounded in memory, JSON in SQLite or Redis, shared by strategies
(replicas), robust to damaged entries and to a Redis outage."""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ctxwindow import Conversation
from ctxwindow.testing import run_threads
from ctxwindow_stores import SQLiteStore
from ctxwindow_summarize import SummarizeWindow
from ctxwindow_summarize.rolling import Summary, SummaryCache

if TYPE_CHECKING:
    from redis_server import RedisServer

#: The fixture redis_server (tests/support, on pytest's pythonpath).
pytest_plugins = ["redis_server"]

FACT = "The budget for the kitchen is 18500 euros, final."


def history(turns: int, tag: str = "") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a planner."}]
    for index in range(turns):
        text = FACT if index == 3 else f"{tag}Chatting about nothing much, round {index}."
        out.append({"role": "user", "content": text, "id": f"u{index}"})
        out.append({"role": "assistant", "content": f"Noted point {index}.", "id": f"a{index}"})
    return out


def summary_texts(window: Any) -> list[str]:
    return [m["content"] for m in window.messages if m.get("metadata", {}).get("synthetic")]


def test_memory_cache_is_bounded_and_keeps_the_newest() -> None:
    cache = SummaryCache(None, entries=50)
    for i in range(500):
        cache.put("extractive", 100, f"{i:064x}", Summary(f"summary {i}", "extractive"))
        assert len(cache.store) <= 50  # type: ignore[arg-type]
    assert cache.get("extractive", 100, f"{499:064x}") == Summary("summary 499", "extractive")
    assert cache.get("extractive", 100, f"{0:064x}") is None


def test_memory_cache_is_bounded_by_bytes() -> None:
    cache = SummaryCache(None, entries=10**6, memory_bytes=100_000)
    for i in range(300):
        cache.put("extractive", 100, f"{i:064x}", Summary("word " * 400, "extractive"))
        assert cache.store.size_bytes <= 100_000  # type: ignore[attr-defined]


@pytest.mark.parametrize("where", ["sqlite", "redis"])
def test_a_second_strategy_on_the_same_store_makes_no_summarizer_call(
    where: str, tmp_path: Path, request: pytest.FixtureRequest, counted: Any
) -> None:
    url = (
        str(tmp_path / "summaries.sqlite3")
        if where == "sqlite"
        else request.getfixturevalue("redis_server").url
    )
    messages = history(40)
    first = SummarizeWindow(cache=url)
    first_calls = counted(first)
    window = first.select(messages, 200)
    assert first_calls[0] > 0 and summary_texts(window)
    second = SummarizeWindow(cache=url)
    second_calls = counted(second)
    again = second.select(messages, 200)
    assert second_calls[0] == 0  # written by the first, read by the second
    assert again.messages == window.messages


def test_a_turn_whose_summary_is_held_in_memory_asks_the_shared_store_nothing(
    tmp_path: Path, counted: Any
) -> None:
    strategy = SummarizeWindow(cache=str(tmp_path / "summaries.sqlite3"))
    calls = counted(strategy)
    back = strategy.cache.store.back  # type: ignore[attr-defined]  # memory before SQLite
    lookups: list[int] = []
    read = back.get_many
    back.get_many = lambda keys: (lookups.append(len(keys)), read(keys))[1]
    conversation = Conversation(history(40))
    strategy.select(conversation, 200)  # a first visit: a summary at the boundary alone
    quiet = 0
    for turn in range(30):
        written, asked = calls[0], len(lookups)
        conversation.append({"role": "user", "content": f"And one more thing, {turn}?"})
        assert summary_texts(strategy.select(conversation, 200))
        if calls[0] == written:  # the boundary's summary was held: read from memory
            assert len(lookups) == asked
            quiet += 1
    assert quiet >= 10  # most turns summarize nothing new


@pytest.mark.parametrize("where", ["memory", "sqlite", "redis"])
def test_replicas_that_summarize_one_prefix_at_once_send_the_first_summary(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two replicas (here two caches on one store) summarized the same prefix at once and
    wrote different texts (a rolling summary depends on what each had cached): each gets
    back the first written, and reads it from then on, so they send one summary."""
    spec = {
        "memory": None,
        "sqlite": str(tmp_path / "summaries.sqlite3"),
        "redis": request.getfixturevalue("redis_server").url if where == "redis" else None,
    }[where]
    caches = [SummaryCache(spec) for _ in range(2)]
    if where == "memory":  # one process: the replicas are threads sharing one cache
        caches[1] = caches[0]
    key = f"{7:064x}"
    first = caches[0].put("extractive", 100, key, Summary("first text", "extractive"))
    second = caches[1].put("extractive", 100, key, Summary("second text", "extractive"))
    assert first == second == Summary("first text", "extractive")
    assert [cache.get("extractive", 100, key) for cache in caches] == [first, first]
    # a damaged entry (written by something else) is no first value: it is replaced, not
    # kept, which would have the summary made again on every visit
    damaged = f"{8:064x}"
    outside = caches[0].store if spec is None else SummaryCache(spec).store
    outside.put_many({SummaryCache.store_key("extractive", 100, damaged): b"\xff{"})
    mine = Summary("mine", "extractive")
    assert caches[1].put("extractive", 100, damaged, mine) == mine
    assert [cache.get("extractive", 100, damaged) for cache in caches] == [mine, mine]


def test_summaries_are_stored_as_json_under_hashed_keys(redis_server: RedisServer) -> None:
    import redis

    strategy = SummarizeWindow(cache=redis_server.url, cache_ttl=60)
    strategy.select(history(40), 200)
    client = redis.Redis.from_url(redis_server.url)
    names = client.keys("*")
    assert names
    for name in names:
        assert name.startswith(b"ctxwindow:v1:summary:extractive:")
        assert b"kitchen" not in name and b"round" not in name
        value = json.loads(client.get(name))
        assert set(value) == {"text", "summarizer"} and value["summarizer"] == "extractive"
        assert 0 < client.ttl(name) <= 60


def test_damaged_entries_are_ignored_and_written_again(tmp_path: Path, counted: Any) -> None:
    path = tmp_path / "summaries.sqlite3"
    messages = history(40)
    window = SummarizeWindow(cache=str(path)).select(messages, 200)
    assert summary_texts(window)
    with sqlite3.connect(path) as db:
        keys = [row[0] for row in db.execute("SELECT key FROM ctxwindow_cache")]
    damage = [b"\x80\x04\x95pickle", b"{not json", b'{"text": 5}', b'["list"]', b'{"text": " "}']
    SQLiteStore(path).put_many({key: damage[i % len(damage)] for i, key in enumerate(keys)})
    again = SummarizeWindow(cache=str(path))
    calls = counted(again)
    assert summary_texts(again.select(messages, 200)) == summary_texts(window)
    assert calls[0] > 0  # nothing damaged was served


def test_redis_outage_keeps_summarizing_with_one_warning(
    redis_server: RedisServer,
) -> None:
    conversation = Conversation(history(30))
    strategy = SummarizeWindow(cache=redis_server.url)
    reference = SummarizeWindow()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy.select(conversation, 200)
        # the same turns as the strategy: a rolling summary depends on those it rolled
        # through (a fresh one summarizes the first checkpoint it meets from scratch)
        reference.select(conversation, 200)
        redis_server.stop()
        for index in range(30, 45):
            conversation.append({"role": "user", "content": f"More talk, round {index}."})
            got = strategy.select(conversation, 200)
            assert summary_texts(got) == summary_texts(reference.select(conversation, 200))
            assert summary_texts(got)  # a summary, not only verbatim turns
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and redis_server.url in messages[0]


def test_one_strategy_from_many_threads_on_sqlite_gives_the_sequential_windows(
    tmp_path: Path,
    counted: Any,
) -> None:
    histories = [history(30 + k, tag=f"h{k} ") for k in range(6)]
    expected = [SummarizeWindow().select(h, 200).messages for h in histories]
    shared = SummarizeWindow(cache=str(tmp_path / "summaries.sqlite3"))
    results: dict[int, Any] = {}

    def work(k: int) -> None:
        for _ in range(3):
            results[k] = shared.select(histories[k], 200).messages

    run_threads(work, 6)
    assert [results[k] for k in range(6)] == expected
    later = SummarizeWindow(cache=str(tmp_path / "summaries.sqlite3"))
    calls = counted(later)
    for h in histories:
        later.select(h, 200)
    assert calls[0] == 0  # every thread's summaries were written


@pytest.mark.parametrize(
    ("cache", "says"),
    [
        ("", "must be 'memory'"),
        ("http://cache:80", "unknown kind of store"),
        (".", "names a folder"),
        ("redis://localhost:notaport/0", "is not valid"),
    ],
)
def test_a_cache_option_that_names_no_store_is_a_clear_error(cache: str, says: str) -> None:
    from ctxwindow.errors import InvalidOption

    with pytest.raises(InvalidOption, match=says):
        SummarizeWindow(cache=cache)


def test_many_asyncio_tasks_on_one_redis_backed_strategy_give_the_sequential_windows(
    redis_server: RedisServer,
) -> None:
    import asyncio

    histories = [history(30 + k, tag=f"a{k} ") for k in range(6)]
    expected = [SummarizeWindow().select(h, 200).messages for h in histories]
    shared = SummarizeWindow(cache=redis_server.url)

    async def main() -> list[Any]:
        tasks = (shared.aselect(h, 200) for h in histories * 3)
        return list(await asyncio.wait_for(asyncio.gather(*tasks), timeout=300))

    windows = asyncio.run(main())
    assert [w.messages for w in windows] == expected * 3
