"""The embedding cache and the per-conversation indexes: bounds, Redis, damaged entries,
threads. The strategy tests run the real model; the store-level ones a tiny embedder."""

from __future__ import annotations

import gc
import hashlib
import re
import struct
import threading
import tracemalloc
import types
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import ctxwindow
from ctxwindow import Conversation
from ctxwindow.testing import run_threads
from ctxwindow_semantic import SemanticWindow, onnx_backend
from ctxwindow_semantic.cache import EmbeddingCache, content_key, decode, encode
from ctxwindow_semantic.index import IndexPool
from ctxwindow_stores import SQLiteStore

if TYPE_CHECKING:
    from redis_server import RedisServer

DOCS = Path(__file__).resolve().parents[3] / "docs"

#: The fixture redis_server (tests/support, on pytest's pythonpath).
pytest_plugins = ["redis_server"]

#: The default embedder's cache name: ``auto`` runs int8 one text per call where
#: onnxruntime is installed (vectors of its own), else torch.
MODEL = "sentence-transformers:all-MiniLM-L6-v2" + (
    "+int8-solo" if onnx_backend.available() else ""
)


class TinyEmbedder:
    """Deterministic unit vectors from a text's hash; counts what it is asked."""

    def __init__(self, name: str = "tiny-16", dim: int = 16) -> None:
        self.name = name
        self.dim = dim
        self.calls = 0
        self.texts = 0
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls += 1
            self.texts += len(texts)
        return np.stack([self.vector(text) for text in texts])

    def vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        raw = np.random.default_rng(seed).normal(size=self.dim).astype(np.float32)
        unit: np.ndarray = raw / np.linalg.norm(raw)
        return unit


def chat(turns: int, tag: str = "") -> list[dict[str, Any]]:
    topics = ["the hotel booking", "a train ticket", "the museum", "dinner", "the weather"]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"{tag}About {topics[turn % 5]}, {turn}?"})
        messages.append({"role": "assistant", "content": f"{tag}Noted ({turn})."})
    messages.append({"role": "user", "content": f"{tag}What did we say about the museum?"})
    return messages


def runtime_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


# -- values are checked -----------------------------------------------------------------
def test_a_vector_reads_back_only_for_its_model_size_and_norm() -> None:
    vector = TinyEmbedder().vector("hello")
    value = encode("m", vector)
    assert np.array_equal(decode("m", value), vector)
    assert decode("other-model", value) is None
    assert decode("m", value[:-4]) is None  # cut short
    assert decode("m", value + b"\x00\x00\x80\x3f") is None  # longer than its dimension
    assert decode("m", value[:16] + (vector * 2).astype("<f4").tobytes()) is None  # norm 2
    nan = vector.copy()
    nan[0] = np.nan
    assert decode("m", value[:16] + nan.astype("<f4").tobytes()) is None
    assert decode("m", b"\x80\x04\x95" + b"\x00" * 80) is None  # a pickle is not a vector
    assert decode("m", b"") is None


def test_a_zero_vector_is_stored_under_its_own_tag_and_read_back() -> None:
    value = encode("m", np.zeros(16, np.float32))
    assert value[:4] == b"cwv0" and len(value) == 16  # the header alone
    zero = decode("m", value)
    assert zero is not None and zero.shape == (16,) and not zero.any()
    assert decode("other-model", value) is None
    assert decode("m", value + b"\x00" * 4) is None
    zeroed = encode("m", TinyEmbedder().vector("x"))[:16] + bytes(64)  # a damaged value
    assert decode("m", zeroed) is None


def test_damaged_and_foreign_entries_are_embedded_again_never_served(tmp_path: Path) -> None:
    embedder = TinyEmbedder()
    path = tmp_path / "emb.sqlite3"
    texts = [f"text number {i}" for i in range(12)]
    EmbeddingCache(path).embed(embedder, texts)
    other = TinyEmbedder(name="other-model", dim=16)
    bad: dict[str, bytes] = {
        content_key(embedder.name, texts[0]): encode("other-model", other.vector(texts[0])),
        content_key(embedder.name, texts[1]): encode(embedder.name, np.ones(8) / np.sqrt(8)),
        content_key(embedder.name, texts[2]): b"garbage",
        content_key(embedder.name, texts[3]): encode(embedder.name, embedder.vector("x"))[:-8],
        content_key(embedder.name, texts[4]): struct.pack("<4s8sI", b"cwv1", b"\0" * 8, 16)
        + np.zeros(16, "<f4").tobytes(),
    }
    SQLiteStore(path).put_many(bad)
    fresh = TinyEmbedder()
    cache = EmbeddingCache(path)
    vectors = cache.embed(fresh, texts)
    expected = np.stack([embedder.vector(text) for text in texts])
    assert np.allclose(vectors, expected, atol=1e-6)  # every vector is the text's own
    # 0, 2, 3 and 4 are embedded again at once; 1 (sound, but 8-dimensional among
    # 16-dimensional fresh vectors) right after: five texts, and no others
    assert cache.embedded == 5 and fresh.texts == 5 and fresh.calls == 2


def test_memory_layer_is_bounded_by_bytes_and_results_stay_right() -> None:
    embedder = TinyEmbedder(dim=64)
    cache = EmbeddingCache(None, memory_entries=10**6, memory_bytes=50_000)
    texts = [f"t{i}" for i in range(2_000)]
    for start in range(0, len(texts), 100):
        chunk = texts[start : start + 100]
        got = cache.embed(embedder, chunk)
        assert np.allclose(got, np.stack([embedder.vector(t) for t in chunk]))
        assert cache.store.size_bytes <= 50_000  # type: ignore[attr-defined]
    assert 0 < len(cache.store) < 2_000  # type: ignore[arg-type]


def test_many_threads_on_one_sqlite_cache_lose_no_vector_and_get_no_wrong_one(
    tmp_path: Path,
) -> None:
    embedder = TinyEmbedder()
    path = tmp_path / "emb.sqlite3"
    cache = EmbeddingCache(path, memory_entries=200)  # small: most reads reach SQLite
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for round_ in range(20):
                texts = [f"shared {round_}-{i}" for i in range(5)]
                texts += [f"own {worker}-{round_}-{i}" for i in range(5)]
                got = cache.embed(embedder, texts)
                assert np.allclose(got, np.stack([embedder.vector(t) for t in texts]))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    run_threads(work, 8)
    assert not errors
    everything = [f"shared {r}-{i}" for r in range(20) for i in range(5)]
    everything += [f"own {w}-{r}-{i}" for w in range(8) for r in range(20) for i in range(5)]
    later = TinyEmbedder()
    again = EmbeddingCache(path).embed(later, everything)
    assert later.texts == 0  # every write is there
    assert np.allclose(again, np.stack([embedder.vector(t) for t in everything]))


def test_many_threads_on_one_redis_cache_lose_no_vector(redis_server: RedisServer) -> None:
    embedder = TinyEmbedder()
    cache = EmbeddingCache(redis_server.url, memory_entries=100)

    def work(worker: int) -> None:
        for round_ in range(20):
            texts = [f"shared {round_}"] + [f"own {worker}-{round_}-{i}" for i in range(4)]
            got = cache.embed(embedder, texts)
            assert np.allclose(got, np.stack([embedder.vector(t) for t in texts]))

    run_threads(work, 8)
    everything = [f"shared {r}" for r in range(20)]
    everything += [f"own {w}-{r}-{i}" for w in range(8) for r in range(20) for i in range(4)]
    later = TinyEmbedder()
    again = EmbeddingCache(redis_server.url).embed(later, everything)
    assert later.texts == 0
    assert np.allclose(again, np.stack([embedder.vector(t) for t in everything]))


# -- the strategy with Redis, real model -------------------------------------------------
def test_two_strategies_on_one_redis_share_embeddings(redis_server: RedisServer) -> None:
    import redis

    messages = chat(15, tag="redis ")
    first = SemanticWindow(cache=redis_server.url, cache_ttl=3600)
    window = first.select(messages, 150)
    assert first.cache.embedded > 0
    second = SemanticWindow(cache=redis_server.url)
    again = second.select(messages, 150)
    assert second.cache.embedded == 0  # all from Redis
    assert again.messages == window.messages
    client = redis.Redis.from_url(redis_server.url)
    names = [name.decode() for name in client.keys("*")]
    assert len(names) == first.cache.embedded
    assert all(name.startswith(f"ctxwindow:v1:embedding:{MODEL}:") for name in names)
    assert not any("museum" in name for name in names)
    assert all(0 < client.ttl(name) <= 3600 for name in names)


def test_redis_outage_mid_run_keeps_windows_right_with_one_warning(
    redis_server: RedisServer,
) -> None:
    conversation = Conversation(chat(10, tag="outage "))
    reference = SemanticWindow(cache="memory")
    strategy = SemanticWindow(cache=redis_server.url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (
            strategy.select(conversation, 120).messages
            == reference.select(conversation, 120).messages
        )
        redis_server.stop()
        for turn in range(4):
            conversation.append({"role": "user", "content": f"outage and then {turn}?"})
            window = strategy.select(conversation, 120)
            assert window.messages == reference.select(conversation, 120).messages
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and redis_server.url in messages[0]


def test_truncated_sqlite_cache_under_the_strategy_is_rebuilt_once(tmp_path: Path) -> None:
    path = tmp_path / "emb.sqlite3"
    messages = chat(40, tag="sqlite ")
    first = SemanticWindow(cache=str(path))
    window = first.select(messages, 200)
    first.cache.close()
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size // 2 + 100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = SemanticWindow(cache=str(path))
        assert second.select(messages, 200).messages == window.messages
        assert second.select(messages, 200).messages == window.messages
    messages_ = runtime_warnings(caught)
    assert len(messages_) == 1 and "moved it to" in messages_[0]
    third = SemanticWindow(cache=str(path))
    assert third.select(messages, 200).messages == window.messages
    assert third.cache.embedded == 0  # the rebuilt file was filled again


# -- per-conversation indexes ------------------------------------------------------------
def test_index_pool_is_bounded_by_conversations_and_units_windows_unchanged() -> None:
    strategy = SemanticWindow(cache="memory")
    strategy.indexes = IndexPool(max_conversations=3, max_units=60)
    reference = SemanticWindow(cache="memory")
    conversations = [Conversation(chat(12, tag=f"c{k} ")) for k in range(8)]
    for _round in range(2):
        for conversation in conversations:
            got = strategy.select(conversation, 120).messages
            assert got == reference.select(conversation, 120).messages
            assert len(strategy.indexes) <= 3
            assert strategy.indexes.units <= 60


def test_strategies_with_other_embedders_share_a_pool_without_mixing_vectors(
    ctxwindow_register: Any,
) -> None:
    plugin = types.ModuleType("tiny_embedders")

    @ctxwindow.hookimpl
    def register_embedders(register: Any) -> None:
        register("tiny", lambda argument: TinyEmbedder(f"tiny-{argument}", int(argument or 16)))

    plugin.register_embedders = register_embedders  # type: ignore[attr-defined]
    ctxwindow_register(plugin, name="tiny-embedders")
    pool = IndexPool(max_conversations=10, max_units=10_000)
    conversation = Conversation(chat(30))
    for spec in ("tiny:16", "tiny:24", "tiny:16"):
        shared = SemanticWindow(embedder=spec, cache="memory")
        shared.indexes = pool
        alone = SemanticWindow(embedder=spec, cache="memory")
        got = shared.select(conversation, 150)
        want = alone.select(Conversation(chat(30)), 150)
        assert got.messages == want.messages
        assert [d.score for d in got.record.decisions] == [d.score for d in want.record.decisions]
    assert len(pool) == 2  # one index per embedder: the third strategy reused the first's
    assert pool.units == 2 * len(shared.indexes.get(conversation, "tiny-16"))


def _pool_bytes_per_unit(conversations: int, turns: int, grown: int) -> float:
    """Bytes an IndexPool holds a unit (384-dimension vectors), each conversation's
    buffers having just doubled: the worst case of the bound."""
    strategy = SemanticWindow(embedder=TinyEmbedder("tiny-384", 384), cache="memory")
    chats = [Conversation(chat(turns, tag=f"c{k} ")) for k in range(conversations)]
    gc.collect()
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        for conversation in chats:
            strategy.select(conversation, 150)
        for conversation in chats:
            for turn in range(grown):
                conversation.extend(
                    [
                        {"role": "assistant", "content": f"Noted {turn}."},
                        {"role": "user", "content": f"And the museum, {turn}?"},
                    ]
                )
            strategy.select(conversation, 150)
        units = strategy.indexes.units
        gc.collect()
        with_pool = tracemalloc.get_traced_memory()[0]
        strategy.indexes = IndexPool()
        gc.collect()
        without = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held <= without
    return (with_pool - without) / units


def test_the_index_bound_in_caches_md_is_what_the_pool_holds() -> None:
    """caches.md's figure for 100,000 units covers the pool at its worst (every
    conversation's vector buffer just doubled), and is not far above it."""
    doc = " ".join((DOCS / "caches.md").read_text(encoding="utf-8").split())
    stated = re.search(r"about (\d+) MiB at the bound of 100,000 units", doc)
    assert stated is not None, "caches.md should state the pool's memory at its bound"
    per_unit = int(stated.group(1)) * 2**20 / 100_000
    measured = _pool_bytes_per_unit(conversations=40, turns=30, grown=6)
    assert 0.7 * per_unit <= measured <= per_unit, (measured, per_unit)


def test_a_conversation_larger_than_the_unit_bound_keeps_its_own_index() -> None:
    strategy = SemanticWindow(cache="memory")
    strategy.indexes = IndexPool(max_conversations=10, max_units=10)
    big = Conversation(chat(20, tag="big "))
    strategy.select(big, 150)
    assert len(strategy.indexes) == 1 and strategy.indexes.units > 10
    small = Conversation(chat(6, tag="small "))
    strategy.select(small, 60)
    assert len(strategy.indexes) == 1  # the big one went; the one in use stays
    assert 0 < strategy.indexes.units <= len(small) < 20


def test_index_goes_with_its_conversation() -> None:
    strategy = SemanticWindow(cache="memory")
    conversation = Conversation(chat(12, tag="gone "))
    strategy.select(conversation, 120)
    assert len(strategy.indexes) == 1
    del conversation
    gc.collect()
    assert len(strategy.indexes) == 0


def test_cache_option_accepts_none_as_memory_only() -> None:
    strategy = SemanticWindow(cache=None)
    assert strategy.cache.where == "memory"


def test_a_cache_option_that_names_no_store_is_a_clear_error(tmp_path: Path) -> None:
    from ctxwindow.errors import InvalidOption

    for cache, says in [("", "must be 'memory'"), ("s3://bucket", "unknown kind"), (".", "folder")]:
        try:
            SemanticWindow(cache=cache)
        except InvalidOption as error:
            assert says in str(error)
        else:
            raise AssertionError(f"cache={cache!r} was accepted")


def test_many_asyncio_tasks_on_one_redis_backed_strategy_give_the_sequential_windows(
    redis_server: RedisServer,
) -> None:
    import asyncio

    histories = [chat(10, tag=f"async{k} ") for k in range(6)]
    expected = [SemanticWindow(cache="memory").select(h, 120).messages for h in histories]
    shared = SemanticWindow(cache=redis_server.url)

    async def main() -> list[Any]:
        tasks = (shared.aselect(h, 120) for h in histories * 2)
        return list(await asyncio.wait_for(asyncio.gather(*tasks), timeout=300))

    windows = asyncio.run(main())
    assert [w.messages for w in windows] == expected * 2
