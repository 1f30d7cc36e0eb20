"""Whatever a summarizer does wrong, the visit goes on: staged summarizing stops, a
failure of any kind (an exception, a reply that is no SummaryResult, error text) runs the
fallback chain with a note naming the summarizer and what was wrong, a summarizer the
strategy cannot use is refused at configuration, and a call the time limit gave up on
is not made again at its boundary."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, LLMUsage, SummaryRequest, SummaryResult, Windower
from ctxwindow_summarize import SummarizerFailed, SummarizeWindow
from ctxwindow_summarize.strategy import MIN_SUMMARY_TOKENS, _staged, _Usage


def orders(turns: int) -> list[dict[str, Any]]:
    """A shop chat: an order per turn, with some filler."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help shoppers."}]
    for index in range(turns):
        said = f"My order ORD{index:04d} costs {index * 3} euros. " + "please thanks " * 10
        messages.append({"role": "user", "content": said})
        messages.append({"role": "assistant", "content": f"Noted ORD{index:04d}."})
    return messages


class Custom:
    """A registered summarizer whose reply (or failure) is ``reply(request)``."""

    requires_llm = False
    max_input_tokens = 100_000

    def __init__(self, name: str, reply: Callable[[SummaryRequest], Any]) -> None:
        self.name = name
        self.reply = reply
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> Any:
        self.calls += 1
        return self.reply(request)

    async def asummarize(self, request: SummaryRequest) -> Any:
        return self.summarize(request)


def summary_of(window: Any) -> dict[str, Any]:
    return next(m for m in window.messages if (m.get("metadata") or {}).get("synthetic"))


# -- 1. staged summarizing stops ---------------------------------------------------
def padding(request: SummaryRequest) -> SummaryResult:
    """Like an LLM told "at most N words": it fills about 70% of the target."""
    text = "Summary: " + " ".join(request.texts) + " detail" * 2_000
    return SummaryResult(text[: int(request.target_tokens * 0.7 * 4)])


def test_staged_summaries_under_a_small_input_limit_make_progress(registered: Any) -> None:
    """With the input limit below the summary's size, summaries of summaries never
    shrank below the limit: thousands of calls, then RecursionError."""
    padder = registered(Custom("padder", padding))
    padder.max_input_tokens = 200
    messages = orders(120)
    window = ctxwindow.select(messages, budget=1000, strategy="summarize", summarizer="padder")
    assert summary_of(window)["metadata"]["summarizer"] == "padder"
    assert window.record.notes == ()
    assert padder.calls <= len(messages)  # a stage at least halves what is left


def test_every_chunk_summarized_to_its_full_target_still_converges() -> None:
    """The worst summarizer that keeps to its target: each reply exactly that long."""
    counter = ctxwindow.get_counter("approx")

    def stuffed(request: SummaryRequest) -> SummaryResult:
        words = [f"Fact {index}." for index in range(request.target_tokens)]
        while request.counter.count_text(" ".join(words)) > request.target_tokens:
            words.pop()
        return SummaryResult(" ".join(words))

    stuffer = Custom("stuffer", stuffed)
    stuffer.max_input_tokens = 200
    texts = [f"user: order {index} " + "filler words here " * 8 for index in range(300)]
    history = SimpleNamespace(counter=counter)
    text = _staged(stuffer, None, texts, 250, history, _Usage())  # type: ignore[arg-type]
    assert counter.count_text(text) <= 250
    assert stuffer.calls <= len(texts)


def test_a_previous_summary_filling_the_input_limit_is_a_clear_failure() -> None:
    counter = ctxwindow.get_counter("approx")
    small = Custom("small", lambda r: SummaryResult("A summary."))
    small.max_input_tokens = 200
    previous = "An earlier summary sentence. " * 40  # over 200 tokens: no room beside it
    history = SimpleNamespace(counter=counter)
    with pytest.raises(SummarizerFailed, match="leaves no room for the new messages under its"):
        _staged(small, previous, ["user: a", "user: b"], 250, history, _Usage())  # type: ignore[arg-type]
    assert small.calls == 0


def test_a_summarizer_taking_no_input_is_refused_at_configuration(registered: Any) -> None:
    zero = registered(Custom("zero-input", padding))
    zero.max_input_tokens = 0
    with pytest.raises(ctxwindow.PluginError, match="max_input_tokens must be a positive int"):
        SummarizeWindow(summarizer="zero-input")


# -- 2 and 3. a summarizer's failure of any kind runs the fallback chain -------------
def raises(error: Exception) -> Callable[[SummaryRequest], Any]:
    def reply(request: SummaryRequest) -> Any:
        raise error

    return reply


async def _coroutine() -> SummaryResult:  # pragma: no cover - closed, never run
    return SummaryResult("never")


FAILURES = [
    pytest.param(
        lambda r: SummaryResult("<html><body><h1>502 Bad Gateway</h1></body></html>"),
        "returned no summary: '<html><body><h1>502 Bad Gateway",
        id="html-page",
    ),
    pytest.param(
        lambda r: SummaryResult("I'm sorry, but I can't help with that."),
        "returned no summary: \"I'm sorry",
        id="refusal",
    ),
    pytest.param(
        lambda r: SummaryResult('{"error": {"message": "quota exceeded"}}'),
        'returned no summary: \'{"error"',
        id="json-error",
    ),
    pytest.param(
        raises(TimeoutError("read timed out")), "raised TimeoutError: read timed out", id="timeout"
    ),
    pytest.param(
        raises(ConnectionError("socket closed")),
        "raised ConnectionError: socket closed",
        id="connection",
    ),
    pytest.param(
        lambda r: SummaryResult(None),  # type: ignore[arg-type]
        "returned a SummaryResult whose text is NoneType, not str",
        id="none-text",
    ),
    pytest.param(
        lambda r: "a plain string",
        "returned str, not a ctxwindow.SummaryResult",
        id="plain-str",
    ),
    pytest.param(
        lambda r: SummaryResult("Orders were placed.", {"calls": 1}),  # type: ignore[arg-type]
        "returned a SummaryResult whose usage is dict, not ctxwindow.LLMUsage",
        id="usage-dict",
    ),
    pytest.param(
        lambda r: _coroutine(),
        "returned a coroutine, not a SummaryResult: summarize() must not be async",
        id="coroutine",
    ),
]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a coroutine left unawaited
@pytest.mark.parametrize(("reply", "said"), FAILURES)
def test_a_summarizers_failure_runs_the_fallback_and_the_note_says_what_was_wrong(
    registered: Any, reply: Callable[[SummaryRequest], Any], said: str
) -> None:
    registered(Custom("mine", reply))
    window = ctxwindow.select(orders(40), budget=500, strategy="summarize", summarizer="mine")
    assert summary_of(window)["metadata"]["summarizer"] == "extractive"
    assert len(window.record.notes) == 1
    assert window.record.notes[0].startswith(f"summarizer 'mine' failed: {said}")


@pytest.mark.parametrize(("reply", "said"), FAILURES[3:5])
def test_on_error_raise_raises_the_failure_with_the_summarizers_error_as_cause(
    registered: Any, reply: Callable[[SummaryRequest], Any], said: str
) -> None:
    registered(Custom("raising", reply))
    strategy = SummarizeWindow(summarizer="raising", on_error="raise")
    with pytest.raises(SummarizerFailed, match=said) as raised:
        strategy.select(orders(40), 500)
    assert isinstance(raised.value.__cause__, OSError)  # TimeoutError, ConnectionError


def test_an_interrupt_is_not_taken_for_a_failure(registered: Any) -> None:
    registered(Custom("interrupted", raises(KeyboardInterrupt())))  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        ctxwindow.select(orders(40), budget=500, strategy="summarize", summarizer="interrupted")


def test_an_empty_reply_is_counted_once_in_the_record() -> None:
    """An empty reply's usage was added twice: by the call, and from its failure."""
    strategy = SummarizeWindow()
    empty = Custom("empty", lambda r: SummaryResult("", LLMUsage("test", "m", 1, 10, 0)))
    strategy._summarizers.insert(0, empty)  # type: ignore[arg-type]
    window = strategy.select(orders(40), 500)
    assert "summarizer 'empty' failed: returned an empty summary" in window.record.notes
    assert window.record.llm is not None and window.record.llm.calls == 1


def test_a_summary_that_mentions_an_error_is_not_taken_for_one(registered: Any) -> None:
    """Every summarizer's reply is checked for error text now, so only a reply that
    begins like one is: a chat about an API's failures is summarized as usual."""
    said = "The user's API hit a rate limit, then an internal server error; retry is planned."
    registered(Custom("apis", lambda r: SummaryResult(said)))
    window = ctxwindow.select(orders(40), budget=500, strategy="summarize", summarizer="apis")
    assert summary_of(window)["metadata"]["summarizer"] == "apis"


# -- 4. an LLM summarizer says who is billed -------------------------------------------
def test_an_llm_summarizer_without_provider_and_model_is_told_to_set_them(
    registered: Any,
) -> None:
    llm = registered(Custom("gateway", lambda r: SummaryResult("Orders were placed.")))
    llm.requires_llm = True
    with pytest.raises(ctxwindow.PluginError, match="set its provider and model attribute"):
        SummarizeWindow(summarizer="gateway")


def test_an_llm_summarizers_provider_and_model_are_the_strategys_billing(
    registered: Any,
) -> None:
    llm = registered(Custom("billed", lambda r: SummaryResult("Orders were placed.")))
    llm.requires_llm, llm.provider, llm.model = True, "my-gateway", "my-model"
    strategy = SummarizeWindow(summarizer="billed")
    assert strategy.requires_llm and strategy.billing == {
        "provider": "my-gateway",
        "model": "my-model",
    }


# -- 6. a call the time limit gave up on is that boundary's failure -------------------
class Hung:
    """An endpoint that accepts the call and answers only when the test lets it."""

    name = "hung"
    requires_llm = False
    max_input_tokens = 100_000

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.entered = 0.0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        self.entered = time.monotonic()
        self.release.wait(60)
        return SummaryResult("A late summary.")


def workers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "ctxwindow-summarize"}


def test_a_hung_summarizer_is_called_once_per_boundary_under_a_time_limit(
    registered: Any,
) -> None:
    """It was called again on every turn, each call leaving one more stuck thread."""
    hung = registered(Hung())
    limit = 0.05
    strategy = SummarizeWindow(summarizer="hung", time_limit=limit, on_timeout="recent")
    windower = Windower(strategy, budget=500)
    conversation = Conversation(orders(40))
    before = workers()
    try:
        first = windower.select(conversation)
        assert any("ran out of its time limit" in note for note in first.record.notes)
        while time.monotonic() - hung.entered < limit:  # the host has given up on it
            time.sleep(0.01)
        second = windower.select(conversation)
        note = "summarizer 'hung' failed: still writing this boundary's summary for an earlier"
        assert any(n.startswith(note) for n in second.record.notes), second.record.notes
        assert summary_of(second)["metadata"]["summarizer"] == "extractive"
        windower.select(conversation)  # again: the summary written by the fallback
        assert hung.calls == 1
        assert len(workers() - before) == 1
    finally:
        hung.release.set()
        for worker in workers() - before:
            worker.join(10)


# -- 7. no room is said once, as no room ---------------------------------------------
class TinyRoom(SummarizeWindow):
    """Leaves the summary the least room it is written in: that of the review's agent
    turn, where extractive fits nothing."""

    def _plan(self, history: Any, *args: Any, **kwargs: Any) -> Any:
        plan = super()._plan(history, *args, **kwargs)
        plan.summary_room = MIN_SUMMARY_TOKENS
        return plan


def test_a_room_too_small_for_anything_is_no_room_said_once() -> None:
    window = TinyRoom().select(orders(40), 500)
    said = (
        f"no room for a summary: the {MIN_SUMMARY_TOKENS} tokens left for one hold nothing "
        "the extractive summarizer would keep"
    )
    assert window.record.notes == (said,)
    assert not any("failed" in note for note in window.record.notes)


def test_a_summarizer_named_twice_in_the_chain_is_tried_once() -> None:
    strategy = SummarizeWindow(summarizer="extractive", fallback=["extractive", "drop"])
    assert [summarizer.name for summarizer in strategy._summarizers] == ["extractive"]


# -- 9. summarize() is what the strategy calls, under aselect too -----------------------
class AsyncOnly(Custom):
    def summarize(self, request: SummaryRequest) -> Any:
        raise NotImplementedError("use asummarize")

    async def asummarize(self, request: SummaryRequest) -> Any:
        return SummaryResult("Orders were placed.")


def test_an_async_only_summarizer_fails_over_under_aselect_saying_why(registered: Any) -> None:
    registered(AsyncOnly("async-only", padding))
    windower = Windower(SummarizeWindow(summarizer="async-only"), budget=500)
    window = asyncio.run(windower.aselect(orders(40)))
    assert summary_of(window)["metadata"]["summarizer"] == "extractive"
    assert "asummarize() is optional and not called" in window.record.notes[0]


def test_an_async_summarize_is_refused_at_configuration(registered: Any) -> None:
    class AsyncSummarize(Custom):
        async def summarize(self, request: SummaryRequest) -> Any:  # type: ignore[override]
            return SummaryResult("never")

    registered(AsyncSummarize("async-summarize", padding))
    with pytest.raises(ctxwindow.PluginError, match=r"summarize\(\) is async"):
        SummarizeWindow(summarizer="async-summarize")


# -- 10. openai is named among the summarizers -----------------------------------------
def test_an_unknown_summarizer_is_told_of_openai_too() -> None:
    with pytest.raises(ctxwindow.UnknownSummarizer, match=r"available: .*openai.*'openai'\?"):
        SummarizeWindow(summarizer="openia")


def test_get_summarizer_openai_asks_for_a_model_not_an_install() -> None:
    with pytest.raises(ctxwindow.LLMNotConfigured, match="needs a model") as raised:
        ctxwindow.get_summarizer("openai")
    assert "pip install" not in str(raised.value)


def test_openai_with_a_model_is_a_summarizer_and_takes_the_strategys_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    local = "http://127.0.0.1:9/v1"
    made = ctxwindow.get_summarizer("openai:my-model")
    assert made.model == "my-model"
    strategy = SummarizeWindow(summarizer="openai:other-model", llm_base_url=local)
    assert strategy.billing == {"provider": "openai-compatible", "model": "other-model"}
    assert strategy._summarizers[0].name == f"openai:other-model@{local}"
