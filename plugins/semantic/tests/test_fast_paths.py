"""The warm turn's shortcuts give exactly what the plain computations give: BM25 grown a
unit at a time and scored for every term at once, fusion and spreading in place, the
cache's one hash per distinct text and its own norm, the index pool's running count of
units. Windows rank by these numbers and records show them, so "close" is not enough:
each is compared bit for bit with the expression it stands in for."""

from __future__ import annotations

import gc
import math
import random
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from ctxwindow import Conversation
from ctxwindow.kit import terms
from ctxwindow_semantic import SemanticWindow
from ctxwindow_semantic.cache import EmbeddingCache, _checked
from ctxwindow_semantic.index import IndexPool
from ctxwindow_semantic.lexical import K1, B, BM25Index, term_counts
from ctxwindow_semantic.scoring import NEIGHBOUR_DECAY, fuse, spread_to_neighbours
from ctxwindow_semantic.strategy import _reason

WORDS = "hotel flight budget morning city price plan trip data call result museum".split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30)))


def bits(array: np.ndarray) -> bytes:
    return bytes(np.ascontiguousarray(array).view(np.uint8))


def test_bm25_grown_a_unit_at_a_time_holds_the_arrays_of_one_grown_in_batches() -> None:
    rng = random.Random(11)
    texts = [sentence(rng) for _ in range(200)] + ["", "the of and"]
    one_by_one, batched = BM25Index(), BM25Index()
    for text in texts:
        one_by_one.extend([text])  # a chat turn's path
    start = 0
    while start < len(texts):
        step = rng.choice([2, 3, 17])
        batched.extend(texts[start : start + step])
        start += step
    assert bits(one_by_one.lengths.view) == bits(batched.lengths.view)
    assert bits(one_by_one._ends.view) == bits(batched._ends.view)
    assert set(one_by_one.postings) == set(batched.postings)
    assert list(one_by_one.postings._recent) == list(batched.postings._recent)  # for branches
    for term, posting in one_by_one.postings.items():
        twin = batched.postings[term]
        assert bits(posting.units.view) == bits(twin.units.view), term
        assert bits(posting.counts.view) == bits(twin.counts.view), term
    for query in ["hotel budget", sentence(rng), "nothing here"]:
        assert bits(one_by_one.scores(query)) == bits(batched.scores(query))


def per_term_scores(index: BM25Index, query: str, size: int, extra: Sequence[str]) -> np.ndarray:
    """BM25 as the index scored before: the float32 formula term by term, in the query's
    order, each term's gain added to its units (the reference for scoring all at once)."""
    extra_counts = [Counter(terms(text)) for text in extra]
    extra_lengths = [sum(counts.values()) for counts in extra_counts]
    total = size + len(extra)
    out = np.zeros(total, dtype=np.float32)
    stored = int(index._ends.view[size - 1]) if size else 0
    average = max((stored + sum(extra_lengths)) / total, 1.0)
    for term in dict.fromkeys(terms(query)):
        units, counts, lengths = index._holding(term, size, extra_counts, extra_lengths)
        if not len(units):
            continue
        idf = math.log(1 + (total - len(units) + 0.5) / (len(units) + 0.5))
        norm = K1 * (1 - B + B * lengths / average)
        out[units] += idf * counts * (K1 + 1) / (counts + norm)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bm25_scored_for_all_terms_at_once_is_the_per_term_sum_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    texts = [sentence(rng) for _ in range(rng.choice([1, 30, 600]))]
    index = BM25Index()
    index.extend(texts)
    queries = [
        "hotel budget hotel",  # a term twice: counted once, in its first place
        sentence(rng),
        "zebra museum",  # a term held only by a stand-in
        "zebra",
        "the of",  # stopwords only
    ]
    for query in queries:
        for size in sorted({0, 1, len(texts) // 2, len(texts)}):
            for extra in ([], ["zebra zebra museum"], [sentence(rng), "", "zebra trip"]):
                if size + len(extra) == 0:
                    continue
                got = index.scores(query, size, extra)
                want = per_term_scores(index, query, size, extra)
                assert got.dtype == np.float32
                assert bits(got) == bits(want), (query, size, extra)


def test_term_counts_are_the_terms_counted_in_first_seen_order() -> None:
    text = "Museum trips and hotel, museum again; budget hotels"
    counts = term_counts(text)
    assert counts == Counter(terms(text))
    assert list(counts) == list(dict.fromkeys(terms(text)))
    assert term_counts(text) is counts  # remembered: a turn reads its new message twice


def plain_fuse(dense: np.ndarray, lexical: np.ndarray, weight: float) -> np.ndarray:
    def scaled(values: np.ndarray) -> np.ndarray:
        if values.size == 0:
            return values.astype(np.float32)
        low, high = float(values.min()), float(values.max())
        if high - low < 1e-9:
            return np.zeros_like(values, dtype=np.float32)
        return ((values - low) / (high - low)).astype(np.float32)

    fused: np.ndarray = (1.0 - weight) * scaled(dense) + weight * scaled(lexical)
    return fused


def plain_spread(scores: np.ndarray, strength: float, reach: int) -> np.ndarray:
    out = scores.astype(np.float32, copy=True)
    weight = strength
    for distance in range(1, min(reach, scores.size - 1) + 1):
        out[distance:] += weight * scores[:-distance]
        out[:-distance] += weight * scores[distance:]
        weight *= NEIGHBOUR_DECAY
    return out


@pytest.mark.parametrize("size", [0, 1, 2, 5, 1_000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fusion_and_spreading_in_place_round_as_the_plain_expressions(
    size: int, dtype: type
) -> None:
    rng = np.random.default_rng(size)
    dense = rng.standard_normal(size).astype(dtype)
    lexical = (rng.random(size) * 7).astype(dtype)
    lexical[: size // 2] = 0
    for weight in (0.0, 0.4, 1.0):
        got, want = fuse(dense, lexical, weight), plain_fuse(dense, lexical, weight)
        assert got.dtype == want.dtype and bits(got) == bits(want)
    flat = np.full(size, 3.0, dtype=dtype)
    assert bits(fuse(flat, flat, 0.4)) == bits(plain_fuse(flat, flat, 0.4))
    for strength, reach in ((0.25, 4), (0.0, 4), (0.5, 0), (0.25, 50)):
        got, want = (
            spread_to_neighbours(dense, strength, reach),
            plain_spread(dense, strength, reach),
        )
        assert got.dtype == want.dtype and bits(got) == bits(want)


def test_cache_checks_vectors_with_numpys_own_norm_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    for rows, dimension in ((1, 384), (3, 16), (64, 768)):
        raw = rng.standard_normal((rows, dimension)).astype(np.float32) * 3
        want = raw / np.linalg.norm(raw, axis=1, keepdims=True)
        assert bits(_checked(raw, rows, "m")) == bits(want)
    zero = np.zeros((2, 4), np.float32)
    zero[1, 0] = 2.0
    assert _checked(zero, 2, "m").tolist() == [
        [0.0] * 4,
        [1.0, 0.0, 0.0, 0.0],
    ]  # similar to nothing
    for bad in (np.full((1, 4), np.nan, np.float32), np.full((1, 4), np.inf, np.float32)):
        with pytest.raises(ValueError, match="'m' returned a non-finite vector"):
            _checked(bad, 1, "m")


class CountingEmbedder:
    name = "counting-8"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        rows = [np.random.default_rng(len(t) + 7 * sum(map(ord, t))).normal(size=8) for t in texts]
        return np.asarray(rows, dtype=np.float32)


def test_a_text_asked_twice_in_one_call_is_embedded_once_and_served_twice() -> None:
    cache, embedder = EmbeddingCache("memory"), CountingEmbedder()
    got = cache.embed(embedder, ["a new message", "a new message", "older", "a new message"])
    assert embedder.texts == ["a new message", "older"]
    assert bits(got[0]) == bits(got[1]) == bits(got[3]) and bits(got[0]) != bits(got[2])
    again = cache.embed(embedder, ["older", "a new message"])
    assert embedder.texts == ["a new message", "older"]  # both cached now
    assert bits(again) == bits(got[[2, 0]])


def chat(turns: int, tag: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are helpful."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"{tag} about the museum, {turn}?"})
        messages.append({"role": "assistant", "content": f"{tag} noted ({turn})."})
    return messages


def test_index_pools_running_count_of_units_is_the_sum_of_its_indexes(hashing: str) -> None:
    strategy = SemanticWindow(embedder=hashing, cache="memory")
    strategy.indexes = pool = IndexPool(max_conversations=4, max_units=50)
    rng = random.Random(4)
    conversations = [Conversation(chat(rng.randint(1, 8), f"c{k}")) for k in range(7)]
    for step in range(60):
        conversation = rng.choice(conversations)
        if rng.random() < 0.3:
            conversation.append({"role": "user", "content": f"and step {step}?"})
        if rng.random() < 0.1:  # one goes, a branch of another comes
            conversations.remove(conversation)
            del conversation
            gc.collect()
            parent = rng.choice(conversations)
            conversations.append(parent.branch(max(1, len(parent) - 2)))
            continue
        strategy.select(conversation, 80)
        held = pool.units
        assert pool._total == held == sum(pool._counted.values())
        assert len(pool) <= 4 and (held <= 50 or len(pool) == 1)


def worded_afresh(
    task: int | None, covered: set[str] | None, rank: int, unit: int, added: int | None
) -> str:
    """The reason as the strategy worded it before remembering its wordings."""
    if unit == task:
        return "task statement (ranked first among older units)"
    where = f"rank {rank + 1}" if rank >= 0 else "kept"
    if covered is None:
        return f"relevant to the query ({where})"
    if added is None:
        added = len({f"ID{unit}", "shared"} - covered)
    return f"relevant to the query ({where}, adds {added} identifiers)"


def test_reasons_read_as_reasons_worded_afresh() -> None:
    class History:
        task_unit = 2

    class Coverage:
        def __init__(self) -> None:
            self.covered = {"shared"}

        def of(self, unit: int) -> set[str]:
            return {f"ID{unit}", "shared"}

    for coverage in (None, Coverage()):
        covered = None if coverage is None else coverage.covered
        for _pass in range(2):  # the same words each time
            for rank in (-1, 0, 1, 7, 400):
                for unit in (2, 5):
                    for added in (None, 0, 3):
                        got = _reason(History(), coverage, rank, unit, added)  # type: ignore[arg-type]
                        assert got == worded_afresh(2, covered, rank, unit, added)
