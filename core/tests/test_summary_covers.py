"""A summary's ``metadata.covers`` places it: one that names nothing of the history, or
is not a list of references, could sit anywhere (even before the system prompt), so the
runner refuses it, and ``check_window`` holds every summary to its place on its own,
so that a bug in the runner's check cannot hide a misplaced summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ctxwindow._checker
from ctxwindow import BaseStrategy, ContractViolation, History, Message, Selection, Windower
from ctxwindow.testing import check_window

Covers = Callable[[list[str]], object]


def chat() -> list[dict[str, Any]]:
    """A system prompt, eight older exchanges, and the newest question."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in range(8):
        messages.append({"role": "user", "content": f"question {turn} " * 6})
        messages.append({"role": "assistant", "content": f"answer {turn} " * 6})
    messages.append({"role": "user", "content": "and now?"})
    return messages


class Summarizes(BaseStrategy):
    """Summarizes units 2-9 (messages 2-9) and keeps the rest; the summary says it covers
    ``covers(refs)`` and goes before unit ``before`` (10: where what it covers was)."""

    name = "summarizes"

    def __init__(self, covers: Covers, before: int = 10, **options: Any) -> None:
        super().__init__(**options)
        self.covers, self.before = covers, before

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        older = range(2, 10)
        selection.summarize(older, "in the summary")
        for unit in range(10, len(history.units)):
            selection.keep(unit, "recent")
        refs = [history.covers_ref(p) for unit in older for p in history.span(unit)]
        metadata = {"synthetic": True, "covers": self.covers(refs)}
        selection.add_synthetic(Message("system", "Summary.", metadata=metadata), self.before)
        return selection


BAD_COVERS: list[tuple[str, Covers, str]] = [
    ("empty", lambda refs: [], r"metadata.covers names no message of this history \(\[\]\)"),
    ("unknown", lambda refs: ["#9999"], r"names no message of this history \(\['#9999'\]\)"),
    ("string", ",".join, "metadata.covers is a str, not a list or tuple"),
    ("set", set, "metadata.covers is a set, not a list or tuple"),
    ("none", lambda refs: None, "metadata.covers is a NoneType, not a list"),
    ("float", lambda refs: [*refs, 1.5], "metadata.covers holds 1.5, not a reference"),
    ("bool", lambda refs: (True, *refs), "metadata.covers holds True, not a reference"),
]


@pytest.mark.parametrize("before", [0, 10], ids=["before-the-system-prompt", "in-place"])
@pytest.mark.parametrize(
    ("covers", "problem"), [c[1:] for c in BAD_COVERS], ids=[c[0] for c in BAD_COVERS]
)
def test_covers_that_cannot_place_a_summary_is_a_contract_violation(
    covers: Covers, problem: str, before: int
) -> None:
    strategy = Summarizes(covers, before)
    windower = Windower(strategy, 250, "approx", distribution="acme-summaries")
    with pytest.raises(ContractViolation, match=problem) as raised:
        windower.select(chat())
    assert "'summarizes' (from distribution 'acme-summaries')" in str(raised.value)
    with pytest.raises(ContractViolation, match=problem):
        check_window(strategy, chat(), 250)


@pytest.mark.parametrize("shape", [list, tuple])
def test_covers_naming_messages_no_longer_sent_is_held_to_those_found(shape: type) -> None:
    """A rolling summary may name messages the caller no longer sends: it is placed by
    the references found, and refused only when none is."""

    def rolling(refs: list[str]) -> object:
        return shape(["gone-1", "gone-2", *refs])

    window = check_window(Summarizes(rolling), chat(), 250)
    assert window is not None
    assert window.messages[2]["content"] == "Summary."
    with pytest.raises(ContractViolation, match="covering messages 2-9 sits before message 0"):
        Windower(Summarizes(rolling, before=0), 250, "approx").select(chat())


def test_a_summary_without_covers_is_held_to_no_place() -> None:
    """A made message that says nothing of what it covers is not a summary the checks
    can place (only kept out of the current turn), as the contract says."""
    window = check_window(Summarizes(lambda refs: refs), chat(), 250)
    assert window is not None

    class NoCovers(Summarizes):
        def choose(self, history: History) -> Selection:
            selection = super().choose(history)
            before, made = selection.synthetic[0]
            plain = Message("system", made.content, metadata={"synthetic": True})
            selection.synthetic[0] = (before, plain)
            return selection

    assert check_window(NoCovers(lambda refs: refs, before=0), chat(), 250) is not None


@pytest.fixture
def runner_blind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's placement check switched off, as a bug in it would: what
    check_window finds then, it finds on its own."""
    monkeypatch.setattr(ctxwindow._checker, "_placement_problems", lambda *args: [])


@pytest.mark.usefixtures("runner_blind")
@pytest.mark.parametrize(
    ("strategy", "problem"),
    [
        (Summarizes(lambda refs: refs, before=0), "covering messages 2-9 sits before message 0"),
        (Summarizes(lambda refs: refs, before=12), "covering messages 2-9 sits after message 11"),
        (Summarizes(lambda refs: [], before=0), "metadata.covers names no input message"),
        (Summarizes(",".join), "metadata.covers must be a list or tuple"),
        (Summarizes(lambda refs: [None]), "metadata.covers holds None"),
        (
            Summarizes(lambda refs: refs, before=18),
            r"sits after the newest user message \(message 17\) and covers \(2, 9\)",
        ),
    ],
    ids=["before", "after", "names-nothing", "string", "not-a-reference", "after-the-question"],
)
def test_check_window_holds_a_summary_to_its_place_on_its_own(
    strategy: Summarizes, problem: str
) -> None:
    with pytest.raises(AssertionError, match=problem):
        check_window(strategy, chat(), 250)


@pytest.mark.usefixtures("runner_blind")
def test_check_window_finds_summarized_units_with_no_made_message() -> None:
    class Forgets(Summarizes):
        def choose(self, history: History) -> Selection:
            selection = super().choose(history)
            selection._summarizes = False  # past the runner's own check of this
            selection.synthetic.clear()
            return selection

    with pytest.raises(AssertionError, match="no made message stands for them"):
        check_window(Forgets(lambda refs: refs), chat(), 250)


@pytest.mark.usefixtures("runner_blind")
def test_check_window_reads_covers_by_id_and_position() -> None:
    """Ids, ``#position`` and int positions name the same messages to check_window as
    to the runner (``history.covers_ref`` gives an id when it leads back to its
    message)."""
    messages = chat()
    for position, message in enumerate(messages):
        message["id"] = f"m{position}"
    for covers in (lambda refs: refs, lambda refs: list(range(2, 10)), lambda refs: ["#2", "#9"]):
        assert check_window(Summarizes(covers), messages, 250) is not None
        with pytest.raises(AssertionError, match="covering messages 2-9 sits before message 0"):
            check_window(Summarizes(covers, before=0), messages, 250)


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The ``covers`` references the checker looks up from now on, in order."""
    looked_up: list[object] = []
    covered = ctxwindow._checker._covered

    def counted(ref: object, history: History) -> int | None:
        looked_up.append(ref)
        return covered(ref, history)

    monkeypatch.setattr(ctxwindow._checker, "_covered", counted)
    return looked_up


def test_a_covers_tuple_handed_over_again_is_not_resolved_again(resolved: list[object]) -> None:
    """Checking what covers is does not undo the checker's memory of where a tuple's
    messages are: a rolling summary's same tuple, next turn, costs no lookups."""
    from ctxwindow import Conversation

    kept: list[tuple[str, ...]] = []

    def same_tuple(refs: list[str]) -> tuple[str, ...]:
        if not kept:
            kept.append(tuple(refs))
        return kept[0]

    conversation = Conversation(chat())
    strategy = Summarizes(same_tuple)
    Windower(strategy, 250, "approx").select(conversation)
    assert len(resolved) == 8
    conversation.append({"role": "assistant", "content": "fine"})
    conversation.append({"role": "user", "content": "next?"})
    resolved.clear()
    Windower(strategy, 250, "approx").select(conversation)
    assert resolved == []


def test_covers_position_reads_what_covers_ref_writes() -> None:
    """One reading of the ``#position`` form, shared by the runner's check, the testing
    kit and the plugins that map a summary's covers (pipeline, adapters)."""
    from ctxwindow.kit import covers_position

    assert covers_position("#1") == 1 and covers_position("#0") == 0
    assert covers_position("#12") == 12  # whether or not a history holds it
    for other in ("msg_1", "#", "#-1", "#1a", 1, None, 1.0):
        assert covers_position(other) is None


def test_a_rolled_covers_tuple_is_compared_with_the_longest_held_one_alone(
    resolved: list[object],
) -> None:
    """A rolling summary's next tuple (the last one and what was folded in since) is
    resolved from the longest held tuple it starts with: that one compared with it,
    not every tuple held of the conversation (in a long agent turn, each a pass over
    the turn), and only the references it adds looked up."""
    from ctxwindow import Conversation, get_counter

    compared = [0]

    class Counted(tuple):  # type: ignore[type-arg]
        def __eq__(self, other: object) -> bool:
            compared[0] += 1
            return tuple.__eq__(self, other)

        __hash__ = tuple.__hash__

    messages = chat() * 3
    history = Conversation(messages).view(get_counter("approx"), 10_000)
    refs = [history.covers_ref(position) for position in range(1, len(messages))]
    spans = ctxwindow._checker._CoverSpans()
    assert spans.span(Counted(refs[:1]), history) == (1, 1)
    for stop in range(2, spans.KEPT + 8):
        compared[0] = 0
        resolved.clear()
        assert spans.span(Counted(refs[:stop]), history) == (1, stop)
        assert compared[0] == 1 and resolved == [refs[stop - 1]]


def test_a_span_read_where_some_named_messages_were_missing_is_read_again_later() -> None:
    """A tuple naming a message a view does not hold (not sent yet) is held to those
    found there; in a later view holding it, to all it names, not the span remembered."""
    from ctxwindow import Conversation, get_counter

    conversation = Conversation(chat()[:5])
    counter = get_counter("approx")
    covers = ("#2", "#9")
    spans = ctxwindow._checker._CoverSpans()
    assert spans.span(covers, conversation.view(counter, 10_000)) == (2, 2)
    conversation.extend(chat()[5:])
    assert spans.span(covers, conversation.view(counter, 10_000)) == (2, 9)
    assert spans.span((*covers, "#10"), conversation.view(counter, 10_000)) == (2, 10)


def test_a_tuple_naming_a_message_never_sent_looks_that_one_up_alone_again(
    resolved: list[object],
) -> None:
    """A rolling summary may name messages the caller no longer sends: the same tuple
    next turn, and the next one rolled on from it, look up what was not found and
    what is new, not every message named again."""
    from ctxwindow import Conversation, get_counter

    conversation = Conversation(chat())
    counter = get_counter("approx")
    history = conversation.view(counter, 10_000)
    covers = ("gone-1", *(history.covers_ref(position) for position in range(1, 16)))
    spans = ctxwindow._checker._CoverSpans()
    assert spans.span(covers, history) == (1, 15)
    conversation.append({"role": "assistant", "content": "fine"})
    later = conversation.view(counter, 10_000)
    resolved.clear()
    assert spans.span(covers, later) == (1, 15)
    assert resolved == ["gone-1"]
    resolved.clear()
    assert spans.span((*covers, later.covers_ref(16)), later) == (1, 16)
    assert resolved == ["gone-1", later.covers_ref(16)]
