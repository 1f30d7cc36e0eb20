"""One request's visit: parse the body (in part, when its history grew from one read
before: :mod:`ctxwindow_serve.bodies`), find the model's budget, window the history,
and give back the bytes to forward.

Whatever goes wrong here, the request still goes upstream: a body that is not JSON,
or not the shape expected, goes as it came (the upstream's own error is the one that
counts); a strategy that fails gives way to ``fixed`` at the same budget, and if that
fails too the body goes as it came. Only a budget with no room left for any history is
answered here, with a 400 naming the numbers.

A body with much the proxy has not read before is windowed in a worker thread (see
OFF_LOOP_BYTES): counting it on the event loop would keep every other client waiting.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ctxwindow import Window, Windower, WindowRecord, from_config, get_counter
from ctxwindow.errors import BudgetTooSmall, ConfigError, CtxWindowError, InvalidMessage
from ctxwindow_serve.bodies import BYTES_PER_HISTORY, RecentBodies
from ctxwindow_serve.budget import Budget, PartCounts, request_budget
from ctxwindow_serve.settings import ModelEntry, ServeSettings
from ctxwindow_serve.shapes import Shape, same_items

logger = logging.getLogger("ctxwindow.serve")

#: The strategy a failing one gives way to: the newest messages that fit.
FALLBACK_STRATEGY = "fixed"
#: The configured options every strategy takes that the fallback keeps: it must treat an
#: oversized message, an orphan tool result and the task statement as configured.
FALLBACK_OPTIONS = ("oversize", "orphans", "task_statement")
#: How orjson writes a float of 1e16 or more: an integer past 64 bits it read (as a
#: float) is written so too.
_EXPONENT = b"e+"
#: Every digit as ``0`` (the other bytes as they are), to find a run of 19 digits.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_NUMBER = b"0" * 19
#: What the note of a window the core built itself, the strategy out of time
#: (``on_timeout = "recent"``), says; the record has no other mark of it.
_TIMED_OUT_NOTE = "ran out of its time limit"
#: A body holding more bytes than this that the proxy has not read before (a new
#: conversation, a long tool result) is windowed in a worker thread, where its counting
#: does not hold the event loop (tiktoken lets go of Python's lock while it encodes;
#: an ``hf:`` tokenizer does not, so there it holds the loop all the same). 64 KiB cost
#: ~4 ms to count with tiktoken, ~35 ms with a slow ``hf:`` one (256 KiB ~170 ms); a
#: smaller body is windowed on the loop, which spares it the thread hop (~0.1 ms).
OFF_LOOP_BYTES = 64 * 1024


@dataclass
class Outcome:
    """What became of one request: the bytes to forward (or the error to answer), and
    what the log, the header and the metrics say of it."""

    content: bytes
    outcome: str
    model: str | None = None
    budget: Budget | None = None
    record: WindowRecord | None = None
    fallback: str | None = None
    note: str | None = None
    refusal: dict[str, Any] | None = None
    #: Why a body the visit read went untouched, as one token for the header (the
    #: error's class name: ``BudgetTooSmall`` for a history that cannot fit).
    reason: str | None = None
    #: History items the window left out, those summaries stand for, and those it
    #: sends cut or stood in for (from the record's decisions only when the window
    #: holds items it made: reading them costs ~10 us a message, the whole latency bar
    #: on a long history).
    dropped: int = 0
    summarized: int = 0
    cut: int = 0
    #: The history the visit read and the window it chose, kept (by reference) only for
    #: the proxy's ``/ui``.
    history: list[Any] | None = None
    window: Window[Any] | None = None
    #: The proxy's whole visit in milliseconds (body parsing and the adapters'
    #: conversions included, which the record's ``elapsed_ms`` leaves out).
    visit_ms: float | None = None


class Windowing:
    """The Windowers of one proxy: one per counter the model entries use (a strategy
    and its caches shared by every model counted alike), built at start so that a bad
    config fails then, not on the first request."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.parts = PartCounts()
        self.bodies = RecentBodies(settings.histories, BYTES_PER_HISTORY * settings.histories)
        self._windowers: dict[str | None, Windower] = {}
        self._fallbacks: dict[str | None, Windower] = {}
        self._unknown_models: set[str] = set()
        for entry in settings.models:
            _check_counter(entry)
            self.windower(entry)

    def _counter_of(self, entry: ModelEntry) -> str | None:
        counter = entry.counter or self.settings.strategy.get("counter")
        return None if counter is None else str(counter)

    def windower(self, entry: ModelEntry) -> Windower:
        counter = self._counter_of(entry)
        windower = self._windowers.get(counter)
        if windower is None:
            config = {**self.settings.strategy, "budget": entry.context, "counter": counter}
            windower = self._windowers[counter] = from_config(config)
        return windower

    def fallback(self, entry: ModelEntry) -> Windower:
        counter = self._counter_of(entry)
        windower = self._fallbacks.get(counter)
        if windower is None:
            strategy = self.settings.strategy
            common = {key: strategy[key] for key in FALLBACK_OPTIONS if key in strategy}
            config = {
                **common, "strategy": FALLBACK_STRATEGY, "budget": entry.context,
                "counter": counter,
            }  # fmt: skip
            windower = self._fallbacks[counter] = from_config(config)
        return windower

    async def visit(self, shape: Shape, raw: bytes) -> Outcome:
        """The visit of one request body ``raw`` sent to ``shape``'s route."""
        try:
            reading = self.bodies.read(raw, shape.history_key, self._windows)
        except orjson.JSONDecodeError:  # neither orjson nor the standard library reads it
            return Outcome(raw, "not_json", note="body is not JSON")
        body = reading.body
        if not isinstance(body, dict):
            return Outcome(raw, "not_json", note="body is not a JSON object")
        model = body.get("model")
        name = model if isinstance(model, str) else None
        entry = self.settings.model(model)
        if entry is None:
            self._unknown(name)
            return Outcome(raw, "unknown_model", name, note="no [models] entry")
        reason = shape.untouched_reason(body)
        if reason is not None:
            return Outcome(raw, "untouched", name, note=reason)
        windower = self.windower(entry)
        budget = request_budget(body, shape, entry, windower.counter, self.parts)
        if budget.left <= 0:
            message = (
                f"ctxwindow proxy: no room for any history for model {name!r}: {budget.explain()}"
            )
            refusal = shape.error_body("invalid_request_error", message)
            return Outcome(raw, "refused", name, budget, note=message, refusal=refusal)
        reading.remember()  # the next request of this conversation reads what it adds
        return await self._window(shape, body, raw, entry, budget, name, reading.unread)

    async def _window(
        self,
        shape: Shape,
        body: dict[str, Any],
        raw: bytes,
        entry: ModelEntry,
        budget: Budget,
        name: str | None,
        unread: int,
    ) -> Outcome:
        history = body[shape.history_key]
        fallback = None
        try:
            window = await _select(shape, body, self.windower(entry), budget.left, unread)
        except InvalidMessage as error:  # the upstream's answer to it is the one to give
            note = f"not windowed: {error}"
            return Outcome(raw, "untouched", name, budget, note=note, reason=type(error).__name__)
        except BudgetTooSmall as error:  # what must stay is over the budget: no strategy helps
            return Outcome(raw, "untouched", name, budget, note=str(error), reason="BudgetTooSmall")
        except CtxWindowError as error:
            fallback = type(error).__name__
            logger.warning("strategy failed, falling back to %s: %s", FALLBACK_STRATEGY, error)
            try:  # a windower that has not read the history: all of it is new to it
                window = await _select(shape, body, self.fallback(entry), budget.left, len(raw))
            except CtxWindowError as again:
                logger.warning("fallback failed too, forwarding untouched: %s", again)
                return Outcome(
                    raw, "untouched", name, budget, fallback=fallback, note=str(again),
                    reason=type(again).__name__,
                )  # fmt: skip
        return _outcome(window, history, body, raw, shape, budget, name, fallback)

    def _windows(self, model: object) -> bool:
        """Whether a body for ``model`` is windowed: the model has an entry (else its
        history is not read: the body goes as it came)."""
        return self.settings.model(model) is not None

    def _unknown(self, name: str | None) -> None:
        if name not in self._unknown_models:
            self._unknown_models.add(str(name))
            logger.info(
                "model %r has no [models] entry: its requests are forwarded untouched", name
            )


def _check_counter(entry: ModelEntry) -> None:
    """A model entry's own counter, built at start: a bad one is named with its entry
    (the windower's error would not say which entry it came from)."""
    if entry.counter is None:
        return
    try:
        get_counter(entry.counter)
    except CtxWindowError as error:
        raise ConfigError(f'[models."{entry.name}"] counter: {error}') from None


async def _select(
    shape: Shape, body: Mapping[str, Any], windower: Windower, budget: int, unread: int
) -> Window[Any]:
    """The window of the body's history: in a worker thread when the windower has more
    than OFF_LOOP_BYTES of it to read and count (the event loop keeps serving other
    clients meanwhile), through the strategy's ``choose`` under the same time limit;
    else on the loop, as :meth:`Shape.window` gives it."""
    if unread <= OFF_LOOP_BYTES:
        return await shape.window(body, windower, budget)
    return await asyncio.to_thread(shape.select, body, windower, budget)


def _outcome(
    window: Window[Any],
    history: list[Any],
    body: dict[str, Any],
    raw: bytes,
    shape: Shape,
    budget: Budget,
    name: str | None,
    fallback: str | None,
) -> Outcome:
    record = window.record
    outcome = "fallback" if fallback else "timed_out" if _timed_out(record) else "windowed"
    if same_items(window.messages, history):  # nothing dropped: the bytes as they came
        return Outcome(raw, outcome, name, budget, record, fallback, history=history, window=window)
    content = _rebuilt(body, raw, shape, window.messages, history)
    done = Outcome(content, outcome, name, budget, record, fallback, history=history, window=window)
    if _picked_from(window.messages, history):  # only items of the history: the rest dropped
        done.dropped = record.messages_before - record.messages_after
    else:  # summaries, or cut copies: the record says which messages went where
        done.dropped = _messages_with(record, "dropped")
        done.summarized = _messages_with(record, "summarized")
        done.cut = _messages_with(record, "truncated") + _messages_with(record, "replaced")
    return done


def _timed_out(record: WindowRecord) -> bool:
    """Whether the strategy ran out of time and the core chose the newest messages."""
    return any(_TIMED_OUT_NOTE in note for note in record.notes)


def _messages_with(record: WindowRecord, action: str) -> int:
    """The history's messages whose unit got ``action`` (a unit of a call and its two
    results is three): ``dropped=`` counts messages on every path, as the record's
    ``messages_before`` and ``messages_after`` do, never units. Read from the runs: a
    turn that drops a long stretch reads one run."""
    return sum(len(run.positions) for run in record.decision_runs if run.action == action)


def _rebuilt(
    body: dict[str, Any], raw: bytes, shape: Shape, window: Sequence[Any], history: list[Any]
) -> bytes:
    """The body with the window as its history. orjson reads an integer past 64 bits
    as a float, which it writes as ``1.2345678901234568e+23``: only when the written
    body holds an ``e+`` and the client's a number of 19 digits or more (one such
    integer may be) is the body read again by the standard library, whose integers
    are exact, and the window put in that reading (one ``find`` otherwise)."""
    key = shape.history_key
    content = _dumps({**body, key: shape.sent(window, history)})
    if _EXPONENT not in content or _LONG_NUMBER not in raw.translate(_DIGITS_AS_ZERO):
        return content
    exact = _read_exactly(raw, key, window, history)
    if exact is None:
        return content
    body, window, history = exact
    return _dumps({**body, key: shape.sent(window, history)})


def _read_exactly(
    raw: bytes, key: str, window: Sequence[Any], history: list[Any]
) -> tuple[dict[str, Any], list[Any], list[Any]] | None:
    """The body as the standard library reads it (every integer exact), and the window
    with each item of the history as that reading's (an item the window made stays as
    it is); None when that reading does not line up with orjson's."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list) or len(items) != len(history):
        return None
    as_read = {id(old): new for old, new in zip(history, items, strict=True)}
    return body, [as_read.get(id(item), item) for item in window], items


def _picked_from(window: Sequence[Any], history: Sequence[Any]) -> bool:
    """Whether the window is items of the history, the very objects, in its order. A
    window that is the history's head and tail (the system prompt and the newest
    messages, say) is seen at once from both ends; the rest is walked by identity (a
    set of the history's ids would cost ~200 us on 1,400 messages)."""
    size, length = len(window), len(history)
    head = 0
    while head < size and head < length and window[head] is history[head]:
        head += 1
    tail = 0
    while (
        tail < size - head
        and tail < length - head
        and window[size - 1 - tail] is history[length - 1 - tail]
    ):
        tail += 1
    remaining = iter(history[head : length - tail])
    for item in window[head : size - tail]:
        for original in remaining:
            if original is item:
                break
        else:
            return False
    return True


def _dumps(body: Mapping[str, Any]) -> bytes:
    """The body as JSON. What orjson does not write, an integer past 64 bits or a lone
    surrogate (a body the standard library read), the standard library does; a lone
    surrogate, which UTF-8 cannot hold and can stand only in a string, is written as the
    escape it came as (``\\ud83d``)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def header_value(outcome: Outcome) -> str:
    """The ``x-ctxwindow`` header: the visit in one line."""
    record = outcome.record
    if record is None:  # not windowed: why, when the outcome alone does not say
        reason = f"; reason={outcome.reason}" if outcome.reason else ""
        return f"outcome={outcome.outcome}{reason}"
    parts = [
        f"strategy={record.strategy}",
        f"tokens={record.tokens_before}->{record.tokens_after}",
        f"dropped={outcome.dropped}",
        f"summarized={outcome.summarized}",
        f"cut={outcome.cut}",
        f"budget={record.budget}",
    ]
    if outcome.fallback:
        parts.append(f"fallback={outcome.fallback}")
    elif outcome.outcome == "timed_out":  # the newest messages that fit, not the strategy's
        parts.append("reason=VisitTimeout")
    return "; ".join(parts)
