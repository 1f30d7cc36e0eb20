"""Replicas share work through Redis: two separate processes window the same
conversations with the semantic and summarize strategies on one redis-server; the
second embeds nothing and calls no summarizer, and returns the same windows.

The fast test uses a small deterministic embedder registered by a plugin in each
process; the ``slow`` one the real all-MiniLM-L6-v2 (loading torch costs seconds per
process). Both print their figures (run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from redis_server import RedisServer

#: The fixture redis_server (tests/support, on pytest's pythonpath).
pytest_plugins = ["redis_server"]

REPLICA = r"""
import hashlib, json, sys, time, types
import numpy as np
import ctxwindow
from ctxwindow import Conversation
from ctxwindow_semantic import SemanticWindow
from ctxwindow_summarize import SummarizeWindow

url, embedder, conversations, turns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


class Hashing:
    name = "shared-cache-hashing-64"

    def __init__(self):
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, int(hashlib.sha256(word.encode()).hexdigest(), 16) % 64] += 1.0
        out[:, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


if embedder == "hashing":
    model = Hashing()
    module = types.ModuleType("shared_cache_embedder")

    @ctxwindow.hookimpl
    def register_embedders(register):
        register("shared-cache-hashing", lambda argument: model)

    module.register_embedders = register_embedders
    ctxwindow.register_plugin(module, "shared-cache-embedder")
    embedder = "shared-cache-hashing"

semantic = SemanticWindow(embedder=embedder, cache=url)
summarize = SummarizeWindow(cache=url)
calls = [0]
for summarizer in summarize._summarizers:
    original = summarizer.summarize

    def counted(request, _original=original):
        calls[0] += 1
        return _original(request)

    summarizer.summarize = counted

topics = ["the hotel in Lisbon", "train tickets", "a dentist appointment", "the kitchen budget",
          "Alma's move to Porto", "the football match", "a birthday present", "the car repair"]
digest = hashlib.sha256()
selects = 0
started = time.perf_counter()
for k in range(conversations):
    chat = Conversation([{"role": "system", "content": "You are a helpful planner."}])
    for turn in range(turns):
        topic = topics[(turn * 3 + k) % len(topics)]
        ask = f"Conversation {k}, turn {turn}: what about {topic}?"
        chat.append({"role": "user", "content": ask})
        chat.append({"role": "assistant", "content": f"About {topic}: noted, item {turn}."})
        for strategy in (semantic, summarize):
            window = strategy.select(chat, 300)
            digest.update(json.dumps(window.messages, sort_keys=True).encode())
            selects += 1
print(json.dumps({
    "embedded": semantic.cache.embedded,
    "summarizer_calls": calls[0],
    "selects": selects,
    "windows": digest.hexdigest(),
    "seconds": round(time.perf_counter() - started, 2),
}))
"""


def replica(url: str, embedder: str, conversations: int, turns: int) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", REPLICA, url, embedder, str(conversations), str(turns)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr, done.stderr[-3000:]  # no fallback happened
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(server: RedisServer, embedder: str, conversations: int, turns: int) -> None:
    import redis

    first = replica(server.url, embedder, conversations, turns)
    client = redis.Redis.from_url(server.url)
    embeddings = len(client.keys("ctxwindow:v1:embedding:*"))
    summaries = len(client.keys("ctxwindow:v1:summary:*"))
    second = replica(server.url, embedder, conversations, turns)
    print(
        f"\nshared cache ({embedder}, {conversations} conversations x {turns} turns, "
        f"{first['selects']} selects per process): first process embedded "
        f"{first['embedded']} texts and made {first['summarizer_calls']} summarizer calls; "
        f"second embedded {second['embedded']} and made {second['summarizer_calls']}; "
        f"Redis holds {embeddings} embeddings and {summaries} summaries; windowing took "
        f"{first['seconds']} s in the first process, {second['seconds']} s in the second"
    )
    assert first["embedded"] > 0 and first["summarizer_calls"] > 0
    assert embeddings == first["embedded"]  # every embedding was shared
    assert second["embedded"] == 0  # the second replica embedded nothing new
    assert second["summarizer_calls"] == 0  # and summarized nothing again
    assert second["windows"] == first["windows"]  # the same windows


def test_two_processes_share_embeddings_and_summaries_through_redis(
    redis_server: RedisServer,
) -> None:
    measure(redis_server, "hashing", conversations=6, turns=40)


@pytest.mark.slow
def test_two_processes_share_minilm_embeddings_and_summaries_through_redis(
    redis_server: RedisServer,
) -> None:
    measure(redis_server, "sentence-transformers", conversations=4, turns=30)
