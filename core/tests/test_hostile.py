"""Hostile input at every door: the CLI and the Python API.

Every bad input gets one clear error: the CLI prints one line naming the problem and
what to do and exits non-zero, with no traceback unless ``--debug``; the API raises a
ctxwindow.errors exception whose message names the problem. No input file changes.

Most CLI cases run ``ctxwindow._cli.main`` in this process (a subprocess per case would
take minutes); a sample runs as a real subprocess too, to see exactly what a user sees.

Agent-shaped histories (calls still waiting on results, parallel, out-of-order and
retried results, dozens of rounds, tool results far over the budget, odd ids and
contents) run through every installed strategy, each window checked by the independent
oracle of ctxwindow.testing.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import math
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Strategy
from ctxwindow import _cli as cli
from ctxwindow.errors import (
    BudgetTooSmall,
    ConfigError,
    CtxWindowError,
    InvalidBudget,
    InvalidMessage,
    InvalidOption,
    InvalidQuery,
    LLMNotConfigured,
    OrphanToolResult,
    UnknownCounter,
    UnknownStrategy,
)
from ctxwindow.testing import (
    agent_loop,
    assistant,
    calls,
    check_window,
    example_instances,
    result,
    user,
)
from ctxwindow.testing.checks import CUT_MARK
from ctxwindow.testing.commands import CommandResult, run_command
from ctxwindow.testing.conversations import AWKWARD_TEXTS


def select(messages: Any, budget: Any, strategy: Any = "newest", **options: Any) -> Any:
    """ctxwindow.select with the testing kit's strategy (conftest registers it)."""
    return ctxwindow.select(messages, budget, strategy, **options)


async def aselect(messages: Any, budget: Any, strategy: Any = "newest", **options: Any) -> Any:
    return await ctxwindow.aselect(messages, budget, strategy, **options)


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"
GOOD = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]


def _call(name: str, call_id: str = "a") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


# -- message payloads: (id, the JSON-able value, a phrase the error must contain) ------
BAD_MESSAGES: list[tuple[str, Any, str]] = [
    ("object-not-list", {"role": "user", "content": "x", "extra": [1]}, "list of messages"),
    ("list-of-strings", ["hello", "world"], "expected a dict"),
    ("list-of-numbers", [1, 2.5], "expected a dict"),
    ("nested-nonsense", [[[{"role": "user"}]]], "expected a dict"),
    ("list-of-nulls", [None], "expected a dict"),
    ("unknown-role", [{"role": "wizard", "content": "x"}], "unknown role 'wizard'"),
    ("role-missing", [{"content": "x"}], "unknown role None"),
    ("role-number", [{"role": 7, "content": "x"}], "unknown role 7"),
    ("role-list", [{"role": ["user"], "content": "x"}], "unknown role ['user']"),
    ("role-case", [{"role": "User", "content": "x"}], "unknown role 'User'"),
    ("content-missing", [{"role": "user"}], "'content' is missing"),
    ("content-number", [{"role": "user", "content": 5}], "'content' must be a string"),
    ("content-object", [{"role": "user", "content": {"text": "x"}}], "'content' must be"),
    ("content-bool", [{"role": "user", "content": True}], "'content' must be"),
    ("part-string", [{"role": "user", "content": ["x"]}], "content part 0 must be a dict"),
    ("part-no-type", [{"role": "user", "content": [{"text": "x"}]}], "with a 'type'"),
    ("part-text-none", [{"role": "user", "content": [{"type": "text"}]}], "without 'text'"),
    ("part-text-number", [{"role": "user", "content": [{"type": "text", "text": 3}]}], "text"),
    ("name-number", [{"role": "user", "content": "x", "name": 5}], "'name' must be a string"),
    ("metadata-list", [{"role": "user", "content": "x", "metadata": [1]}], "'metadata' must"),
    ("pinned-string", [{"role": "user", "content": "x", "metadata": {"pinned": "yes"}}], "pinned"),
    ("pinned-number", [{"role": "user", "content": "x", "metadata": {"pinned": 1}}], "pinned"),
    ("id-float", [{"role": "user", "content": "x", "id": 1.5}], "'id' must be a string"),
    ("id-bool", [{"role": "user", "content": "x", "id": True}], "'id' must be a string"),
    ("id-object", [{"role": "user", "content": "x", "id": {"a": 1}}], "'id' must be a string"),
    (
        "tool-calls-object",
        [{"role": "assistant", "content": None, "tool_calls": {"id": "a"}}],
        "'tool_calls' must be a list",
    ),
    (
        "tool-call-string",
        [{"role": "assistant", "content": None, "tool_calls": ["a"]}],
        "tool call 0 must be a dict",
    ),
    (
        "tool-call-no-id",
        [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}],
        "has no 'id'",
    ),
    (
        "tool-call-no-name",
        [{"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {}}]}],
        "no function 'name'",
    ),
    (
        "tool-call-type-number",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "a", "type": 1, "function": {"name": "f"}}],
            },
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ],
        "'type' must be a string",
    ),
    (
        "tool-calls-on-user",
        [{"role": "user", "content": "x", "tool_calls": [_call("f")]}],
        "only assistant messages may carry tool_calls",
    ),
    ("tool-without-id", [{"role": "tool", "content": "r"}], "needs the 'tool_call_id'"),
    (
        "tool-call-id-on-user",
        [{"role": "user", "content": "x", "tool_call_id": "a"}],
        "'tool_call_id' belongs on tool messages",
    ),
    (
        "duplicate-call-ids",
        [
            {"role": "assistant", "content": None, "tool_calls": [_call("f"), _call("g")]},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ],
        "appears twice in one message",
    ),
    (
        "result-without-call",
        [
            {"role": "tool", "tool_call_id": "ghost", "content": "r"},
            {"role": "user", "content": "q"},
        ],
        "pass orphans='drop'",
    ),
    (
        "call-without-result",
        [
            {"role": "assistant", "content": None, "tool_calls": [_call("f")]},
            {"role": "user", "content": "q"},
        ],
        "pass orphans='drop'",
    ),
    (
        "result-after-another-message",
        [
            {"role": "assistant", "content": None, "tool_calls": [_call("f")]},
            {"role": "user", "content": "meanwhile"},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ],
        "pass orphans='drop'",
    ),
    (
        "one-of-two-results",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call("f", "a"), _call("g", "b")],
            },
            {"role": "tool", "tool_call_id": "b", "content": "r"},
            {"role": "user", "content": "q"},
        ],
        "pass orphans='drop'",
    ),
    (
        "result-answered-twice",
        [
            {"role": "assistant", "content": None, "tool_calls": [_call("f")]},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
            {"role": "tool", "tool_call_id": "a", "content": "again"},
        ],
        "pass orphans='drop'",
    ),
]
#: Payloads that are tool-exchange defects: clear errors by default, dropped with 'drop'.
DEFECTS = {
    "result-without-call",
    "call-without-result",
    "result-after-another-message",
    "one-of-two-results",
    "result-answered-twice",
}
MESSAGE_IDS = [case[0] for case in BAD_MESSAGES]

BAD_BUDGETS: list[Any] = [
    0,
    -1,
    -(10**30),
    1.5,
    "abc",
    "100",
    math.nan,
    math.inf,
    True,
    None,
    [100],
]


# -- the API ---------------------------------------------------------------------------
def _raises_cleanly(call: Callable[[], Any], kind: type[CtxWindowError], phrase: str) -> str:
    with pytest.raises(CtxWindowError) as raised:
        call()
    assert isinstance(raised.value, kind), f"{type(raised.value).__name__}: {raised.value}"
    text = str(raised.value)
    assert phrase in text, text
    assert "\n" not in text, "an error message is one line"
    return text


def _kind(case: str) -> type[CtxWindowError]:
    return OrphanToolResult if case in DEFECTS else InvalidMessage


@pytest.mark.parametrize(("case", "payload", "phrase"), BAD_MESSAGES, ids=MESSAGE_IDS)
def test_api_bad_messages_are_one_clear_error(case: str, payload: Any, phrase: str) -> None:
    before = copy.deepcopy(payload)
    _raises_cleanly(lambda: select(payload, 100), _kind(case), phrase)
    assert payload == before
    _raises_cleanly(
        lambda: ctxwindow.from_config({"strategy": "newest", "budget": 100}).select(payload),
        _kind(case),
        phrase,
    )
    strategy = ctxwindow.get_strategy("newest")
    _raises_cleanly(lambda: strategy.select(payload, 100), _kind(case), phrase)
    assert payload == before


@pytest.mark.parametrize(("case", "payload", "phrase"), BAD_MESSAGES, ids=MESSAGE_IDS)
def test_conversation_rejects_what_select_rejects(case: str, payload: Any, phrase: str) -> None:
    if case in DEFECTS:  # a Conversation grows one message at a time: defects are legal
        conversation = ctxwindow.Conversation(payload)
        _raises_cleanly(lambda: select(conversation, 100), OrphanToolResult, "orphans='drop'")
        window = select(conversation, 100, orphans="drop")
        assert window.record.notes
        return
    before = copy.deepcopy(payload)
    _raises_cleanly(lambda: ctxwindow.Conversation(payload), InvalidMessage, phrase)
    if isinstance(payload, list) and payload:
        growing = ctxwindow.Conversation()
        _raises_cleanly(lambda: [growing.append(m) for m in payload], InvalidMessage, phrase)
    assert payload == before


@pytest.mark.parametrize("case", sorted(DEFECTS))
def test_api_defects_are_dropped_on_request_and_said(case: str) -> None:
    payload = {c: p for c, p, _ in BAD_MESSAGES}[case]
    window = select(payload, 1000, orphans="drop")
    dropped = [d for d in window.record.decisions if d.unit < 0]
    assert dropped and all(d.action == "dropped" for d in dropped)
    gone = {p for d in dropped for p in d.positions}
    assert not any(payload[p] is m for p in gone for m in window.messages)


@pytest.mark.parametrize(
    "messages",
    [None, "hello", b"[]", 5, 2.5, {"role": "user", "content": "x"}, object()],
    ids=["none", "str", "bytes", "int", "float", "dict", "object"],
)
def test_api_messages_of_the_wrong_type(messages: Any) -> None:
    _raises_cleanly(lambda: select(messages, 100), InvalidMessage, "messages")
    _raises_cleanly(lambda: ctxwindow.Conversation(messages), InvalidMessage, "messages")


def test_the_errors_module_says_which_standard_exception_a_wrong_type_is() -> None:
    """Its docstring is what code written against ``except TypeError`` reads: a wrong
    type is a ValueError like a wrong value; only the query's is a TypeError."""
    errors = [
        error
        for error in vars(ctxwindow.errors).values()
        if isinstance(error, type) and issubclass(error, ctxwindow.CtxWindowError)
    ]
    assert [error.__name__ for error in errors if issubclass(error, TypeError)] == ["InvalidQuery"]
    with pytest.raises(InvalidMessage) as wrong_type:
        select("hello", 100)
    assert isinstance(wrong_type.value, ValueError)
    assert not isinstance(wrong_type.value, TypeError)
    doc = " ".join((ctxwindow.errors.__doc__ or "").split())
    assert "a wrong type as much as a wrong value" in doc
    assert (
        "only :class:`InvalidQuery`, a query that is not a string, is a :class:`TypeError`" in doc
    )


@pytest.mark.parametrize("budget", BAD_BUDGETS, ids=repr)
def test_api_bad_budgets(budget: Any) -> None:
    messages = copy.deepcopy(GOOD)
    _raises_cleanly(lambda: select(messages, budget), InvalidBudget, "budget")
    _raises_cleanly(
        lambda: ctxwindow.from_config({"strategy": "newest", "budget": budget}),
        InvalidBudget,
        "budget",
    )
    if budget is not None:  # None there means the configured budget
        windower = ctxwindow.from_config({"strategy": "newest", "budget": 100})
        _raises_cleanly(lambda: windower.select(messages, budget=budget), InvalidBudget, "budget")
    assert messages == GOOD


def test_api_huge_budget_is_a_window_of_everything() -> None:
    window = select(GOOD, 10**30)
    assert window.messages == GOOD and window.record.engaged is False


@pytest.mark.parametrize(
    ("strategy", "kind", "phrase"),
    [
        (5, InvalidOption, "strategy must be a name"),
        (None, InvalidOption, "strategy must be a name"),
        (["newest"], InvalidOption, "strategy must be a name"),
        ("", UnknownStrategy, "installed strategies: "),
        ("FIXED", UnknownStrategy, "unknown strategy 'FIXED'"),
        ("newest\n", UnknownStrategy, "unknown strategy 'newest\\n'"),
        ("../../etc/passwd", UnknownStrategy, "installed strategies"),
    ],
    ids=repr,
)
def test_api_bad_strategy_names(strategy: Any, kind: type[CtxWindowError], phrase: str) -> None:
    _raises_cleanly(lambda: select(GOOD, 100, strategy), kind, phrase)
    _raises_cleanly(
        lambda: ctxwindow.from_config({"strategy": strategy, "budget": 100}), kind, phrase
    )


def test_api_a_strategy_object_where_a_name_is_asked_says_what_to_do() -> None:
    strategy = ctxwindow.get_strategy("newest")
    advice = (
        "strategy must be a name (str), got Newest; to use a strategy object, call "
        "ctxwindow.Windower(strategy, budget).select(messages) or strategy.select(messages, "
        "budget)"
    )
    _raises_cleanly(lambda: select(GOOD, 100, strategy), InvalidOption, advice)
    config = {"strategy": strategy, "budget": 100}
    _raises_cleanly(lambda: ctxwindow.from_config(config), InvalidOption, advice)


@pytest.mark.parametrize(
    ("strategy", "phrase"),
    [
        ("fixed", "got the name 'fixed': build one with ctxwindow.get_strategy('fixed')"),
        (5, "got int"),
        (object(), "a str 'name' and a choose(history) method"),
    ],
    ids=["a name", "an int", "an object"],
)
def test_api_a_windower_given_no_strategy_object(strategy: Any, phrase: str) -> None:
    """Found by an agent-loop user's review: a name was taken, then each visit failed
    with AttributeError, and the error handler with it."""
    _raises_cleanly(lambda: ctxwindow.Windower(strategy, 100), InvalidOption, phrase)


def test_api_transform_on_a_strategy_that_has_none_says_what_to_use() -> None:
    windower = ctxwindow.Windower(ctxwindow.get_strategy("newest"), 100)
    _raises_cleanly(
        lambda: windower.transform(GOOD), InvalidOption, "has no transform(): only a strategy"
    )


@pytest.mark.parametrize(
    ("counter", "kind", "phrase"),
    [
        (5, InvalidOption, "counter must be a name"),
        (["approx"], InvalidOption, "counter must be a name"),
        ("", UnknownCounter, "unknown token counter"),
        ("nope", UnknownCounter, "unknown token counter 'nope'"),
        ("tiktoken:nope", InvalidOption, "tiktoken knows no encoding or model 'nope'"),
        ("hf:", InvalidOption, "needs a path"),
        ("hf:/nonexistent/tokenizer.json", InvalidOption, "no tokenizer file"),
    ],
    ids=repr,
)
def test_api_bad_counters(counter: Any, kind: type[CtxWindowError], phrase: str) -> None:
    _raises_cleanly(lambda: select(GOOD, 100, counter=counter), kind, phrase)


@pytest.mark.parametrize("query", [5, b"q", ["q"], {"q": 1}], ids=repr)
def test_api_bad_queries(query: Any) -> None:
    _raises_cleanly(lambda: select(GOOD, 100, query=query), InvalidQuery, "query")


@pytest.mark.parametrize(
    ("options", "phrase"),
    [
        ({"time_limit": "ten"}, "expects float | None, got str 'ten'"),
        ({"time_limit": -1}, "must be a positive, finite number of seconds"),
        ({"time_limit": True}, "got bool True"),
        ({"time_limit": math.nan}, "seconds, got nan"),
        ({"oversize": None}, "option 'oversize' expects str"),
        ({"orphans": "keep"}, "must be one of 'raise', 'drop'"),
        ({"colour": "red"}, "'colour' for strategy"),
    ],
    ids=repr,
)
def test_api_bad_options(options: dict[str, Any], phrase: str) -> None:
    _raises_cleanly(lambda: select(GOOD, 100, **options), InvalidOption, phrase)
    _raises_cleanly(
        lambda: ctxwindow.from_config({"strategy": "newest", "budget": 100, **options}),
        InvalidOption,
        phrase,
    )


def test_api_unknown_keys_of_other_types_are_listed() -> None:
    config: dict[Any, Any] = {"strategy": "newest", "budget": 100, 1: 2, "x": 3}
    _raises_cleanly(lambda: ctxwindow.from_config(config), InvalidOption, "unknown key(s) 1, 'x'")


@pytest.mark.parametrize(
    "arguments",
    [
        {"x": object()},
        {"x": {1, 2}},
    ],
    ids=["object", "set"],
)
def test_api_tool_arguments_that_are_not_json(arguments: Any) -> None:
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": arguments}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "r"},
    ]
    _raises_cleanly(lambda: select(messages, 100), InvalidMessage, "not JSON data")


def test_api_deeply_nested_content_part() -> None:
    deep: list[Any] = []
    inner = deep
    for _ in range(5_000):
        inner.append([])
        inner = inner[0]
    messages = [{"role": "user", "content": [{"type": "x", "data": deep}]}]
    if sys.version_info < (3, 13):  # json cannot encode it: the part is named
        _raises_cleanly(lambda: select(messages, 100), InvalidMessage, "not JSON data")
        return
    # Python 3.13's json encodes it: a non-text part like any other (a fixed count)
    window = select(messages, 100)
    assert window.tokens <= 100 and window.messages[0] is messages[0]


@pytest.mark.parametrize(
    ("source", "phrase"),
    [
        (5, "config must be a dict or a path"),
        (b"ctxwindow.toml", "config must be a dict or a path"),
        ([("strategy", "fixed")], "config must be a dict or a path"),
        ({"strategy": "newest"}, "config has no 'budget'"),
        ({"budget": 5}, "config has no 'strategy'"),
    ],
    ids=repr,
)
def test_api_config_of_the_wrong_shape(source: Any, phrase: str) -> None:
    _raises_cleanly(lambda: ctxwindow.from_config(source), ConfigError, phrase)


def test_api_budget_too_small_names_the_numbers() -> None:
    big = [{"role": "user", "content": "x" * 400}]
    text = _raises_cleanly(lambda: select(big, 60), BudgetTooSmall, "need")
    assert "oversize='truncate'" in text  # it would fit: the message cut to 60 tokens
    text = _raises_cleanly(lambda: select(big, 5), BudgetTooSmall, "need")
    # its marker alone is more: the least budget, under the policy in force and the one
    # that cuts more
    assert "raise the budget to at least 103 tokens (19 with oversize='truncate')" in text


# -- agent-shaped input, for every strategy ---------------------------------------------
def _installed() -> list[str]:
    return sorted(entry["name"] for entry in ctxwindow.describe_strategies())


#: The testing kit's reference strategy and every strategy the installed plugins
#: register (read from the registry, so a newly installed plugin is covered too).
AGENT_STRATEGIES = list(dict.fromkeys(["newest", *_installed()]))
#: One instance per strategy and options for the module, as an app shares one (and the
#: semantic strategy embeds each text once).
_BUILT: dict[str, Strategy] = {}
APPROX = ctxwindow.get_counter("approx")


def _agent_strategy(name: str, **options: Any) -> Strategy:
    """The strategy ``name`` with its first example options (a pipeline needs stages)
    and ``options``; an embedding strategy keeps its embeddings in memory, not in the
    user's cache; skipped when it needs an LLM that is not configured."""
    key = f"{name} {sorted(options.items())!r}"
    if key not in _BUILT:
        factory = ctxwindow.strategy_class(name)
        described = next(d for d in ctxwindow.describe_strategies() if d["name"] == name)
        if "embedder" in {option["name"] for option in described["options"]}:
            options = {"cache": "memory", **options}
        try:
            _BUILT[key] = example_instances(factory, **options)[0]
        except LLMNotConfigured as error:
            pytest.skip(f"{name} needs an LLM, and none is configured: {error}")
    return _BUILT[key]


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(APPROX.count_message(ctxwindow.Message.from_dict(m)) for m in messages)


def _agent_history(*turn: dict[str, Any]) -> list[dict[str, Any]]:
    """A task, an older exchange and its reply, the newest instruction (message 5), then
    ``turn``: the current turn, whose first message is message 6."""
    return [
        {"role": "system", "content": "You are an agent. Use the tools."},
        user("Task: reconcile invoice INV-1001 with the ledger."),
        calls("old"),
        result("old", "INV-1001 amount 12.50 EUR " * 12),
        assistant("Invoice INV-1001 is booked. " * 6),
        user("Now check the build log."),
        *turn,
    ]


def _agent_window(strategy: Strategy, messages: list[Any], budget: int) -> ctxwindow.Window[Any]:
    """The window, checked by the independent oracle (it fits, order kept, no unit
    split, what must stay kept, the record true) and with the input deep-equal after."""
    before = copy.deepcopy(messages)
    window = check_window(strategy, messages, budget)
    assert window is not None, "an error where a window was due"
    assert messages == before, "the input changed"
    assert window.tokens <= budget
    return window


def _held(window: ctxwindow.Window[Any], message: Any) -> bool:
    return any(kept is message for kept in window.messages)


def _assert_run(window: ctxwindow.Window[Any], run: list[Any]) -> None:
    """``run``'s very objects are in the window, one after another, in their order."""
    start = next((i for i, m in enumerate(window.messages) if m is run[0]), None)
    assert start is not None, "the first message of the run is not in the window"
    got = window.messages[start : start + len(run)]
    assert len(got) == len(run) and all(a is b for a, b in zip(got, run, strict=True)), (
        "the run is not whole and in order in the window"
    )


def _note(window: ctxwindow.Window[Any], start: str) -> str:
    found = [n for n in window.record.notes if n.startswith(start)]
    assert found, f"no note starting {start!r} in {window.record.notes}"
    return found[0]


def _least(text: str) -> int:
    """The least budget a BudgetTooSmall names."""
    return int(text.split("to at least ")[1].split(" tokens", maxsplit=1)[0].replace(",", ""))


@pytest.mark.parametrize(
    ("back", "missing"), [((), "'a', 'b'"), (("b",), "'a'")], ids=["none-back", "one-of-two-back"]
)
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_call_still_waiting_on_its_results_is_a_defect(
    name: str, back: tuple[str, ...], missing: str
) -> None:
    """Concepts, Units: a call without (all) its results is a defect, whatever comes
    after it: OrphanToolResult naming the unanswered calls; with orphans='drop' the call
    and the results it has go, a note says so, and the rest is windowed as usual."""
    messages = _agent_history(calls("a", "b"), *(result(i, f"result {i}") for i in back))
    before = copy.deepcopy(messages)
    strict = _agent_strategy(name)
    _raises_cleanly(
        lambda: strict.select(messages, 10_000),
        OrphanToolResult,
        f"message 6: the assistant's tool call(s) {missing} have no tool result",
    )
    assert messages == before
    dropping = _agent_strategy(name, orphans="drop")
    for budget in (10_000, _tokens(messages[:6]) - 20):  # all the rest fits; it does not
        window = _agent_window(dropping, messages, budget)
        assert not any(_held(window, m) for m in messages[6:])
        assert _held(window, messages[5]) and window.messages[-1] is messages[5]
        last = len(messages) - 1
        span = "message 6" if last == 6 else f"messages 6-{last}"
        note = _note(window, f"dropped {span}: ")
        assert f"tool call(s) {missing} have no tool result" in note
    assert _agent_window(dropping, messages, 10_000).messages == messages[:6]


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_results_arriving_one_by_one_into_a_conversation(name: str) -> None:
    """The agent's loop: the call is appended, then its results as they come back, out
    of order, with a visit between each. While one is missing the visit raises (or
    drops the exchange, saying so); once all are in, the exchange is in the window,
    whole and in order, from the same windower (no state left by the earlier visits)."""
    call = calls("a", "b", "c")
    arriving = [result("c", "Oslo 9C " * 20), result("a", "Paris 18C " * 20)]
    arriving.append(result("b", "Rome 24C " * 20))
    whole = _agent_history(call, *arriving)
    budget = _tokens(whole) - 30  # over it: the strategy has to choose
    conversation = ctxwindow.Conversation(whole[:6])
    snapshot = copy.deepcopy(whole)
    dropping = ctxwindow.Windower(_agent_strategy(name, orphans="drop"), budget)
    strict = ctxwindow.Windower(_agent_strategy(name), budget)
    conversation.append(call)
    for message in arriving:
        waiting = dropping.select(conversation)
        assert not _held(waiting, call) and waiting.tokens <= budget
        assert "have no tool result" in _note(waiting, "dropped message")
        with pytest.raises(OrphanToolResult, match="orphans='drop'"):
            strict.select(conversation)
        conversation.append(message)
    for windower in (dropping, strict):
        window = windower.select(conversation)
        _assert_run(window, [call, *arriving])
        assert window.tokens <= budget
        assert not any(n.startswith("dropped message") for n in window.record.notes)
    assert whole == snapshot


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_results_out_of_order_stay_with_their_call_in_their_order(name: str) -> None:
    exchange = [calls("a", "b", "c"), result("c", "Oslo 9C " * 8)]
    exchange += [result("a", "Paris 18C " * 8), result("b", "Rome 24C " * 8)]
    messages = _agent_history(*exchange)
    budget = _tokens([messages[0], messages[5], *exchange]) + 10  # older context: no room
    window = _agent_window(_agent_strategy(name), messages, budget)
    _assert_run(window, exchange)
    assert window.record.engaged


def _parallel_round(words: int) -> list[dict[str, Any]]:
    """One call of 40 tools, the results back in a shuffled order."""
    ids = [f"call_{number:02d}" for number in range(40)]
    order = random.Random(7).sample(ids, len(ids))
    texts = {i: f"HEAD {i} " + "value " * words + f"TAIL {i}" for i in ids}
    return [calls(*ids), *(result(i, texts[i]) for i in order)]


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_forty_parallel_calls_in_one_round_stay_one_unit(name: str) -> None:
    exchange = _parallel_round(5)
    messages = _agent_history(*exchange)
    budget = _tokens([messages[0], messages[5], *exchange]) + 20
    window = _agent_window(_agent_strategy(name), messages, budget)
    _assert_run(window, exchange)
    assert not any(n.startswith("cut the tool result") for n in window.record.notes)


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_forty_big_parallel_results_are_each_cut_and_said(name: str) -> None:
    """Forty results far past the budget together: each is cut, head and tail kept, in
    its place, with a note; too small for even the markers, the error names the least
    budget, which works, and one token less does not."""
    exchange = _parallel_round(200)
    messages = _agent_history(*exchange)
    strategy = _agent_strategy(name)
    window = _agent_window(strategy, messages, 6_000)
    tail = window.messages[-len(exchange) :]
    assert tail[0] is exchange[0]
    for position, (original, cut) in enumerate(zip(exchange[1:], tail[1:], strict=True), 7):
        call_id = original["tool_call_id"]
        assert cut is not original and cut["tool_call_id"] == call_id
        assert cut["content"].startswith(f"HEAD {call_id}")
        assert cut["content"].endswith(f"TAIL {call_id}") and CUT_MARK in cut["content"]
        assert cut["metadata"] == {"truncated": True, "stands_in_for": position}
        _note(window, f"cut the tool result of message {position} (call {call_id!r})")
    text = _raises_cleanly(lambda: strategy.select(messages, 1_500), BudgetTooSmall, "40 tool")
    least = _least(text)
    assert _agent_window(strategy, messages, least).tokens <= least
    with pytest.raises(BudgetTooSmall):
        strategy.select(messages, least - 1)


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_dozens_of_rounds_after_one_instruction(name: str) -> None:
    """Forty rounds after one instruction, past the budget: the newest exchange stays
    whole and a note says the turn was too big; with a second instruction half way,
    the current turn (its twenty rounds) fits and stays whole, without that note."""
    strategy = _agent_strategy(name)
    messages = agent_loop(40, result_words=10)
    window = _agent_window(strategy, messages, 500)
    _assert_run(window, messages[-3:])
    assert "its newest exchange stayed" in _note(window, "the current turn is bigger")
    messages = agent_loop(40, result_words=10, instructions=2)
    newest = max(i for i, m in enumerate(messages) if m["role"] == "user")
    budget = _tokens([*messages[:2], *messages[newest:]]) + 40
    assert budget < _tokens(messages)
    window = _agent_window(strategy, messages, budget)
    _assert_run(window, messages[newest:])
    assert not any(n.startswith("the current turn is bigger") for n in window.record.notes)


def _huge_log() -> str:
    return "HEAD line of the log\n" + "step passed\n" * 5_000 + "TAIL: step 5001 failed"


@pytest.mark.parametrize("oversize", ["cut", "truncate", "raise"])
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_one_tool_result_far_over_the_budget(name: str, oversize: str) -> None:
    messages = _agent_history(calls("log"), result("log", _huge_log()))
    strategy = _agent_strategy(name, oversize=oversize)
    if oversize == "raise":
        before = copy.deepcopy(messages)
        text = _raises_cleanly(
            lambda: strategy.select(messages, 800),
            BudgetTooSmall,
            "message 7, the tool result for call 'log'",
        )
        assert "pass oversize='cut'" in text
        assert messages == before
        return
    window = _agent_window(strategy, messages, 800)
    cut = window.messages[-1]
    assert window.messages[-2] is messages[6] and cut is not messages[7]
    assert cut["tool_call_id"] == "log" and CUT_MARK in cut["content"]
    assert cut["content"].startswith("HEAD line of the log")
    assert cut["content"].endswith("TAIL: step 5001 failed")
    assert cut["metadata"] == {"truncated": True, "stands_in_for": 7}
    _note(window, "cut the tool result of message 7 (call 'log')")
    assert _held(window, messages[5])  # the request is small: never cut
    assert not any(n.startswith("truncated message") for n in window.record.notes)


@pytest.mark.parametrize("oversize", ["cut", "truncate", "raise"])
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_huge_result_after_a_huge_request(name: str, oversize: str) -> None:
    """'cut' may not touch the request: an error that says 'truncate' would do; 'raise'
    names the biggest message; 'truncate' cuts both, each with a note."""
    messages = _agent_history(calls("grep"), result("grep", "HEAD " + "match " * 4_000 + "TAIL"))
    messages[5] = user("Here is my log:\n" + "ERROR line\n" * 3_000 + "END OF LOG")
    strategy = _agent_strategy(name, oversize=oversize)
    before = copy.deepcopy(messages)
    if oversize != "truncate":
        text = _raises_cleanly(
            lambda: strategy.select(messages, 1_500), BudgetTooSmall, "pass oversize='truncate'"
        )
        assert "the biggest is message 5, the newest user message" in text
        assert messages == before
        return
    window = _agent_window(strategy, messages, 1_500)
    request, call, output = window.messages[-3:]
    assert call is messages[6]
    assert request is not messages[5] and request["role"] == "user"
    assert request["content"].startswith("Here is my log:") and CUT_MARK in request["content"]
    assert output is not messages[7] and output["tool_call_id"] == "grep"
    assert output["content"].startswith("HEAD") and output["content"].endswith("TAIL")
    _note(window, "cut the tool result of message 7 (call 'grep')")
    _note(window, "truncated message 5")


@pytest.mark.parametrize("same_object", [False, True], ids=["equal-copy", "same-object"])
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_retried_step_appended_twice(name: str, same_object: bool) -> None:
    answer = result("a", "INV-1001 paid " * 10)
    messages = _agent_history(calls("a"), answer, answer if same_object else dict(answer))
    window = _raises_then_drops(
        name,
        messages,
        "message 8: tool result for call 'a' repeats one the exchange before it (messages 6-7)",
    )
    assert len(window.messages) == 8
    _assert_run(window, messages[5:8])
    assert "repeats one the exchange before it" in _note(window, "dropped message 8: ")


def _raises_then_drops(
    name: str, messages: list[dict[str, Any]], said: str
) -> ctxwindow.Window[Any]:
    """The strategy raises OrphanToolResult saying ``said``, leaving the input as it was;
    with ``orphans='drop'``, its window (the input still as it was)."""
    before = copy.deepcopy(messages)
    strict = _agent_strategy(name)
    _raises_cleanly(lambda: strict.select(messages, 10_000), OrphanToolResult, said)
    assert messages == before
    return _agent_window(_agent_strategy(name, orphans="drop"), messages, 10_000)


def _retried_in_a_parallel_round() -> list[dict[str, Any]]:
    return _agent_history(calls("a", "b"), result("a", "A"), result("a", "A"), result("b", "B"))


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_retried_step_inside_a_parallel_round_is_named(name: str) -> None:
    """The repeat of 'a' is named as what broke the exchange, not only 'b' waiting."""
    messages = _retried_in_a_parallel_round()
    strict = _agent_strategy(name)
    _raises_cleanly(
        lambda: strict.select(messages, 10_000),
        OrphanToolResult,
        "message 6: the tool result for call 'a' at message 8 repeats one this exchange "
        "already holds (a call is answered once), so the assistant's tool call(s) 'b' have "
        "no tool result right after them",
    )


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="orphans='drop' drops the whole pending exchange (and notes b's result as "
    "following no call that made it) for one repeated result, where a repeat after a "
    "one-call round drops the repeat alone",
)
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_retried_step_inside_a_parallel_round_drops_the_repeat_alone(
    name: str,
) -> None:
    messages = _retried_in_a_parallel_round()
    window = _agent_window(_agent_strategy(name, orphans="drop"), messages, 10_000)
    _assert_run(window, [messages[6], messages[7], messages[9]])
    assert not any("'b'" in n for n in window.record.notes)
    _note(window, "dropped message 8: ")


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_result_whose_call_id_matches_no_call(name: str) -> None:
    messages = _agent_history(calls("a"), result("b", "stray"))
    window = _raises_then_drops(
        name, messages, "message 6: the assistant's tool call(s) 'a' have no tool result"
    )
    assert window.messages == messages[:6] and window.messages[-1] is messages[5]
    assert "tool call(s) 'a' have no tool result" in _note(window, "dropped message 6: ")
    assert "call 'b' does not follow" in _note(window, "dropped message 7: ")


def _call_with_id(call_id: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "f"}}],
    }


@pytest.mark.parametrize("call_id", ["", None], ids=repr)
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_tool_call_without_an_id(name: str, call_id: Any) -> None:
    messages = _agent_history(_call_with_id(call_id), result("a"))
    before = copy.deepcopy(messages)
    strategy = _agent_strategy(name)
    _raises_cleanly(
        lambda: strategy.select(messages, 10_000), InvalidMessage, "message 6: tool call 0"
    )
    assert messages == before


@pytest.mark.parametrize("call_id", [5, 1.5, True, ["a"]], ids=repr)
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_tool_call_id_that_is_not_a_string_is_named(name: str, call_id: Any) -> None:
    messages = _agent_history(_call_with_id(call_id), result("a"))
    strategy = _agent_strategy(name)
    text = _raises_cleanly(
        lambda: strategy.select(messages, 10_000), InvalidMessage, "message 6: tool call 0"
    )
    assert "string" in text and "has no 'id'" not in text, text


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_call_ids_twice_in_one_call_and_again_in_a_later_round(name: str) -> None:
    """Twice in one message: an error naming the id. Again in a later round (ids some
    providers reuse): legal, each call paired with the result right after it, the
    newest exchange kept with its own result when the turn does not fit."""
    messages = _agent_history(calls("a", "a"), result("a"))
    strategy = _agent_strategy(name)
    _raises_cleanly(
        lambda: strategy.select(messages, 10_000),
        InvalidMessage,
        "message 6: tool call id 'a' appears twice in one message",
    )
    first = [calls("a"), result("a", "first answer " * 300)]
    second = [calls("a"), result("a", "second answer " * 300)]
    messages = _agent_history(*first, *second)
    window = _agent_window(strategy, messages, _tokens([messages[0], messages[5], *second]) + 30)
    _assert_run(window, second)
    assert not _held(window, first[1])
    assert "its newest exchange stayed" in _note(window, "the current turn is bigger")


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (None, "message 7: 'content' is missing (or None)"),
        (5, "message 7: 'content' must be a string or a list of parts, got int"),
        (b"log", "message 7: 'content' must be a string or a list of parts, got bytes"),
        ({"text": "x"}, "message 7: 'content' must be a string or a list of parts, got dict"),
        (["x"], "message 7: content part 0 must be a dict"),
        ([{"type": "text", "text": None}], "message 7: content part 0 is a text part without"),
    ],
    ids=["none", "number", "bytes", "dict", "list-of-strings", "text-part-none"],
)
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_tool_content_of_the_wrong_type(name: str, content: Any, phrase: str) -> None:
    messages = _agent_history(calls("a"), {"role": "tool", "tool_call_id": "a", "content": content})
    before = copy.deepcopy(messages)
    strategy = _agent_strategy(name)
    _raises_cleanly(lambda: strategy.select(messages, 10_000), InvalidMessage, phrase)
    assert messages == before


def _text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_tool_content_as_parts_is_kept_whole_or_cut_head_and_tail(name: str) -> None:
    parts = [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]
    exchange = [calls("a", "b")]
    exchange += [{"role": "tool", "tool_call_id": "a", "content": parts}]
    exchange += [{"role": "tool", "tool_call_id": "b", "content": []}]
    messages = _agent_history(*exchange)
    strategy = _agent_strategy(name)
    window = _agent_window(strategy, messages, _tokens([messages[0], messages[5], *exchange]) + 10)
    _assert_run(window, exchange)
    huge = [
        {"type": "text", "text": "HEAD " + "part one " * 2_000},
        {"type": "text", "text": "part two " * 2_000 + "TAIL"},
    ]
    messages = _agent_history(calls("p"), {"role": "tool", "tool_call_id": "p", "content": huge})
    window = _agent_window(strategy, messages, 800)
    cut = window.messages[-1]
    assert cut is not messages[7] and cut["tool_call_id"] == "p"
    text = _text_of(cut)
    assert text.startswith("HEAD part one") and text.endswith("TAIL") and CUT_MARK in text
    _note(window, "cut the tool result of message 7 (call 'p')")


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_unicode_and_control_characters_in_results(name: str) -> None:
    """Emoji, right-to-left, combining marks, NUL, escapes, lone surrogates: as results
    they are kept as given; in a huge result, cut between its head and tail, and the
    window still serializes to JSON and back."""
    ids = [f"u{number}" for number in range(len(AWKWARD_TEXTS))]
    exchange = [calls(*ids), *(result(i, t) for i, t in zip(ids, AWKWARD_TEXTS, strict=True))]
    messages = _agent_history(*exchange)
    strategy = _agent_strategy(name)
    window = _agent_window(strategy, messages, _tokens([messages[0], messages[5], *exchange]) + 10)
    _assert_run(window, exchange)
    huge = "START " + "".join(AWKWARD_TEXTS) * 300 + " END"
    messages = _agent_history(calls("u"), result("u", huge))
    window = _agent_window(strategy, messages, 800)
    cut = window.messages[-1]
    assert cut["content"].startswith("START ") and cut["content"].endswith(" END")
    assert CUT_MARK in cut["content"]
    json.dumps(window.messages)  # plain data, as an app sends it
    assert json.loads(json.dumps(cut))["content"] == cut["content"]


@pytest.mark.parametrize("call_id", ["調べる-🎉", "\x00", "\ud800", "\u202eevil", "x, y"], ids=repr)
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_odd_call_ids_are_quoted_where_they_are_named(name: str, call_id: str) -> None:
    """An id is a string of anything: each error and note that names it quotes it, so
    it reads as one id on one line."""
    messages = _agent_history(calls(call_id), result(call_id, "r " * 3_000))
    raising = _agent_strategy(name, oversize="raise")
    _raises_cleanly(lambda: raising.select(messages, 800), BudgetTooSmall, f"for call {call_id!r}")
    window = _agent_window(_agent_strategy(name), messages, 800)
    _note(window, f"cut the tool result of message 7 (call {call_id!r})")
    stray = _agent_history(calls("a"), result("a"), result(call_id))
    window = _agent_window(_agent_strategy(name, orphans="drop"), stray, 10_000)
    assert f"call {call_id!r}" in _note(window, "dropped message 8: ")


@pytest.mark.parametrize("call_id", ["a\nb", "x, y"], ids=repr)
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_an_unanswered_call_s_odd_id_is_quoted(name: str, call_id: str) -> None:
    messages = _agent_history(calls(call_id))
    strategy = _agent_strategy(name)
    _raises_cleanly(lambda: strategy.select(messages, 10_000), OrphanToolResult, repr(call_id))


@pytest.mark.parametrize("oversize", ["cut", "truncate", "raise"])
@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_a_call_that_says_something_and_calls(name: str, oversize: str) -> None:
    """A call with words of its own stays one unit with its results: its words intact
    while its result is cut; words too long for the budget cannot be cut, and the
    error names that message under every policy."""
    said = {**calls("log"), "content": "Let me read the log first."}
    messages = _agent_history(said, result("log", _huge_log()))
    strategy = _agent_strategy(name, oversize=oversize)
    if oversize != "raise":
        window = _agent_window(strategy, messages, 800)
        assert window.messages[-2] is said and window.messages[-1]["tool_call_id"] == "log"
        assert window.messages[-2]["content"] == "Let me read the log first."
        _note(window, "cut the tool result of message 7 (call 'log')")
    wordy = {**calls("t"), "content": "Thinking aloud. " * 2_000}
    messages = _agent_history(wordy, result("t", "ok"))
    before = copy.deepcopy(messages)
    text = _raises_cleanly(lambda: strategy.select(messages, 800), BudgetTooSmall, "message 6")
    assert "assistant message" in text and messages == before


def test_agent_the_biggest_message_is_named_in_good_english() -> None:
    messages = _agent_history({**calls("t"), "content": "Thinking aloud. " * 2_000}, result("t"))
    text = _raises_cleanly(lambda: select(messages, 800), BudgetTooSmall, "message 6")
    assert "an assistant message" in text, text


@pytest.mark.parametrize("name", AGENT_STRATEGIES)
def test_agent_the_same_history_twice_and_others_between(name: str) -> None:
    """One windower visits a history, the same again, one that differs only in the
    pending result, the first grown and then the first again, and the first with its
    pending result edited in place: each window is what that history alone gives (no
    state leaks from one visit to the next), and no visit changes its input."""

    def history(tag: str) -> list[dict[str, Any]]:
        rounds = [m for r in range(20) for m in (calls(f"r{r}"), result(f"r{r}", f"row {r} " * 30))]
        pending = [calls("log"), result("log", f"{tag}-HEAD " + "noise " * 3_000 + f" {tag}-TAIL")]
        return _agent_history(*rounds, user("And the log?"), *pending)

    strategy = _agent_strategy(name)
    windower = ctxwindow.Windower(strategy, 1_500)
    first, other = history("ONE"), history("TWO")
    pristine = copy.deepcopy(first)
    window = windower.select(first)
    assert window.tokens <= 1_500 and "ONE-TAIL" in window.messages[-1]["content"]
    again = windower.select(first)
    assert again.messages == window.messages and again.record.notes == window.record.notes
    assert [d.action for d in again.record.decisions] == [d.action for d in window.record.decisions]
    assert "TWO-TAIL" in windower.select(other).messages[-1]["content"]
    assert "ONE" not in json.dumps(windower.select(other).messages)
    windower.select(
        [*first, assistant("All rows match."), user("Thanks."), calls("z"), result("z")]
    )
    assert windower.select(first).messages == window.messages
    assert asyncio.run(windower.aselect(first)).messages == window.messages
    assert windower.select(ctxwindow.Conversation(first)).messages == window.messages
    assert first == pristine
    edited = copy.deepcopy(first)
    assert windower.select(edited).messages == window.messages
    edited[-1]["content"] = "THREE-HEAD " + "noise " * 3_000 + " THREE-TAIL"
    assert "THREE-TAIL" in windower.select(edited).messages[-1]["content"]


# -- files: messages and configs -------------------------------------------------------
def _random_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


MESSAGE_FILES: list[tuple[str, bytes, str]] = [
    ("truncated-json", b'[{"role": "user", "content": "hi"', "is not valid JSON"),
    ("truncated-mid-string", b'[{"role": "user", "content": "h', "is not valid JSON"),
    ("invalid-json", b"this is not json", "line 1 is not valid JSON"),
    ("trailing-comma", b'[{"role": "user", "content": "hi"},]', "is not valid JSON"),
    ("single-quotes", b"[{'role': 'user', 'content': 'hi'}]", "is not valid JSON"),
    ("random-bytes", _random_bytes(512, 1), "binary"),
    ("random-bytes-2", _random_bytes(4096, 2), "binary"),
    ("random-bytes-no-nul", bytes(b or 1 for b in _random_bytes(512, 5)), "not UTF-8"),
    ("nul-bytes", b"\x00" * 16, "NUL bytes"),
    ("json-with-nul", b'[{"role": "user", "content": "a\x00b"}]', "NUL bytes"),
    ("utf16-le-bom", '[{"role": "user", "content": "hi"}]'.encode("utf-16"), "UTF-16"),
    ("utf16-be-bom", b"\xfe\xff" + '[{"role":"user"}]'.encode("utf-16-be"), "UTF-16"),
    ("invalid-utf8", b'[{"role": "user", "content": "\xff\xfe\xfd"}]', "not UTF-8"),
    ("overlong-utf8", b'[{"role": "user", "content": "\xc0\xaf"}]', "not UTF-8"),
    ("empty", b"", "is empty"),
    ("whitespace-only", b" \n\t\r\n ", "is empty"),
    ("bom-only", b"\xef\xbb\xbf", "is empty"),
    ("pretty-object", b'{\n  "role": "user",\n  "content": "hi"\n}\n', "one JSON object"),
    ("list-of-strings", b'["hello", "world"]', "expected a dict"),
    ("nested-nonsense", b"[[[[{}]]]]", "expected a dict"),
    ("scalar-string", b'"just a string"', "expected a dict"),
    ("scalar-null", b"null", "expected a dict"),
    ("scalar-number", b"42", "expected a dict"),
    ("deeply-nested", _deep_json(100_000), "nested too deeply"),
    ("huge-integer", b'[{"role": "user", "content": "x", "id": ' + b"9" * 5000 + b"}]", "JSON"),
    ("jsonl-bad-third-line", b'{"role":"user","content":"a"}\n\n{"role":', "line 3"),
    ("jsonl-with-array-line", b'{"role":"user","content":"a"}\n[1, 2]\n', "message 1"),
    ("unknown-role", b'[{"role": "wizard", "content": "x"}]', "unknown role 'wizard'"),
    ("wrong-type-content", b'[{"role": "user", "content": 5}]', "'content' must be"),
    ("wrong-type-pinned", b'[{"role":"user","content":"x","metadata":{"pinned":NaN}}]', "pinned"),
    ("content-missing", b'{"role": "user"}', "'content' is missing"),
    (
        "result-without-call",
        b'[{"role": "tool", "tool_call_id": "x", "content": "r"}, {"role":"user","content":"q"}]',
        "orphans='drop'",
    ),
    (
        "call-without-result",
        json.dumps(
            [
                {"role": "assistant", "content": None, "tool_calls": [_call("f")]},
                {"role": "user", "content": "q"},
            ]
        ).encode(),
        "orphans='drop'",
    ),
    (
        "duplicate-call-ids",
        json.dumps(
            [
                {"role": "assistant", "content": None, "tool_calls": [_call("f"), _call("g")]},
                {"role": "tool", "tool_call_id": "a", "content": "r"},
            ]
        ).encode(),
        "appears twice",
    ),
]
FILE_IDS = [case[0] for case in MESSAGE_FILES]

CONFIG_FILES: list[tuple[str, str, bytes, str]] = [
    ("unknown-key", "ctxwindow.toml", b'strategy = "newest"\nbudget = 100\nbogus = 1\n', "bogus"),
    ("budget-string", "ctxwindow.toml", b'strategy = "newest"\nbudget = "100"\n', "budget must"),
    ("budget-float", "ctxwindow.toml", b'strategy = "newest"\nbudget = 1e30\n', "budget must"),
    ("budget-nan", "ctxwindow.toml", b'strategy = "newest"\nbudget = nan\n', "budget must"),
    ("budget-zero", "ctxwindow.toml", b'strategy = "newest"\nbudget = 0\n', "budget must"),
    ("budget-negative", "ctxwindow.toml", b'strategy = "newest"\nbudget = -1\n', "budget must"),
    ("budget-bool", "ctxwindow.toml", b'strategy = "newest"\nbudget = true\n', "budget must"),
    ("budget-table", "ctxwindow.toml", b'strategy = "newest"\n[budget]\na = 1\n', "budget must"),
    ("strategy-number", "ctxwindow.toml", b"strategy = 5\nbudget = 100\n", "must be a name"),
    ("strategy-unknown", "ctxwindow.toml", b'strategy = "nope"\nbudget = 100\n', "'nope'"),
    (
        "counter-list",
        "ctxwindow.toml",
        b'strategy="newest"\nbudget=100\ncounter=["a"]\n',
        "counter",
    ),
    ("counter-unknown", "ctxwindow.toml", b'strategy="newest"\nbudget=1\ncounter="x:y"\n', "'x:y'"),
    (
        "option-wrong-type",
        "ctxwindow.toml",
        b'strategy = "newest"\nbudget = 100\ntime_limit = "ten"\n',
        "expects float | None",
    ),
    (
        "option-wrong-choice",
        "ctxwindow.toml",
        b'strategy = "newest"\nbudget = 100\noversize = "explode"\n',
        "must be one of",
    ),
    ("invalid-toml", "ctxwindow.toml", b'strategy = "fixed\nbudget = \n', "is not valid TOML"),
    ("duplicate-key", "ctxwindow.toml", b"budget = 1\nbudget = 2\n", "is not valid TOML"),
    ("binary", "ctxwindow.toml", _random_bytes(256, 3), "not UTF-8"),
    ("utf16", "ctxwindow.toml", 'strategy = "newest"\n'.encode("utf-16"), "not UTF-8"),
    ("empty", "ctxwindow.toml", b"", "no 'strategy'"),
    ("no-budget", "ctxwindow.toml", b'strategy = "newest"\n', "no 'budget'"),
    ("deep-array", "ctxwindow.toml", b"a = " + b"[" * 50_000 + b"]" * 50_000, "TOML"),
    (
        "pyproject-unknown-key",
        "pyproject.toml",
        b'[tool.ctxwindow]\nstrategy = "newest"\nbudget = 100\nextra = {a = 1}\n',
        "unknown key(s) 'extra'",
    ),
    ("pyproject-table-number", "pyproject.toml", b"[tool]\nctxwindow = 5\n", "must be a table"),
    ("pyproject-tool-number", "pyproject.toml", b"tool = 5\n", "no [tool.ctxwindow] table"),
    ("pyproject-no-table", "pyproject.toml", b'[project]\nname = "x"\n', "no [tool.ctxwindow]"),
    ("pyproject-invalid", "pyproject.toml", b"[tool.ctxwindow\n", "is not valid TOML"),
]
CONFIG_IDS = [case[0] for case in CONFIG_FILES]
#: Where the CLI says it otherwise (it takes the strategy from --strategy too).
CLI_CONFIG_PHRASES = {"empty": "no token budget: pass --budget N", "no-budget": "pass --budget N"}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def unchanged(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """``unchanged(path)``: fail the test if that file changes before it ends."""
    watched: dict[Path, str] = {}

    def watch(path: Path) -> None:
        watched[path] = _digest(path)

    yield watch
    for path, digest in watched.items():
        assert _digest(path) == digest, f"{path} changed"


@pytest.mark.parametrize(("case", "content", "phrase"), MESSAGE_FILES, ids=FILE_IDS)
def test_api_message_files_read_as_the_cli_reads_them(
    tmp_path: Path, case: str, content: bytes, phrase: str, unchanged: Callable[[Path], None]
) -> None:
    """The CLI's reader raises InvalidMessage itself, or hands on what select rejects."""
    source = tmp_path / "messages.json"
    source.write_bytes(content)
    unchanged(source)
    with pytest.raises(CtxWindowError) as raised:
        select(ctxwindow.read_messages_file(str(source)), 100, "newest")
    assert isinstance(raised.value, InvalidMessage)
    assert phrase in str(raised.value)


@pytest.mark.parametrize(("case", "name", "content", "phrase"), CONFIG_FILES, ids=CONFIG_IDS)
def test_api_config_files(
    tmp_path: Path,
    case: str,
    name: str,
    content: bytes,
    phrase: str,
    unchanged: Callable[[Path], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    unchanged(path)
    text = _raises_cleanly(lambda: ctxwindow.from_config(path), CtxWindowError, phrase)
    assert text
    monkeypatch.chdir(tmp_path)  # found by looking in the current folder: the same error
    if case not in ("pyproject-tool-number", "pyproject-no-table"):
        _raises_cleanly(ctxwindow.from_config, CtxWindowError, phrase)


def test_api_config_paths_that_are_no_files(tmp_path: Path) -> None:
    _raises_cleanly(lambda: ctxwindow.from_config(tmp_path), ConfigError, "is a directory")
    _raises_cleanly(
        lambda: ctxwindow.from_config(tmp_path / "missing.toml"), ConfigError, "does not exist"
    )


# -- the CLI, in this process ----------------------------------------------------------
def _cli(
    argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes | None = None
) -> tuple[int, str, str]:
    if argv[:1] == ["select"] and not {"-s", "--strategy", "--config"} & set(argv):
        argv = [*argv, "--strategy", "newest"]  # the testing kit's, registered by conftest
    result = run_command(*argv, stdin=stdin)
    return result.code, result.out, result.err


def _one_clear_line(code: int, err: str, phrase: str) -> None:
    line = CommandResult(code, "", err).error()
    assert phrase in line, line


@pytest.mark.parametrize(("case", "content", "phrase"), MESSAGE_FILES, ids=FILE_IDS)
def test_cli_bad_message_files(
    tmp_path: Path,
    case: str,
    content: bytes,
    phrase: str,
    capsys: pytest.CaptureFixture[str],
    unchanged: Callable[[Path], None],
) -> None:
    source = tmp_path / "messages.json"
    source.write_bytes(content)
    unchanged(source)
    code, out, err = _cli(["select", str(source), "--budget", "100"], capsys)
    _one_clear_line(code, err, phrase)
    assert out == ""


@pytest.mark.parametrize(("case", "content", "phrase"), MESSAGE_FILES[:12], ids=FILE_IDS[:12])
def test_cli_bad_messages_on_stdin(
    case: str, content: bytes, phrase: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = _cli(["select", "-", "--budget", "100"], capsys, stdin=content)
    _one_clear_line(code, err, phrase.replace("messages.json", "stdin"))
    assert "stdin" in err


@pytest.mark.parametrize(
    ("target", "phrase"),
    [("missing.json", "does not exist"), (".", "is a directory")],
)
def test_cli_message_paths_that_are_no_files(
    tmp_path: Path, target: str, phrase: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(["select", str(tmp_path / target), "--budget", "100"], capsys)
    _one_clear_line(code, err, phrase)


@pytest.mark.parametrize(
    ("budget", "phrase"),
    [
        ("0", "budget must be a positive int"),
        ("-1", "budget must be a positive int"),
        ("1.5", "invalid int value: '1.5'"),
        ("abc", "invalid int value: 'abc'"),
        ("NaN", "invalid int value: 'NaN'"),
        ("True", "invalid int value: 'True'"),
        ("", "invalid int value: ''"),
        ("1e3", "invalid int value: '1e3'"),
    ],
)
def test_cli_bad_budgets(
    budget: str, phrase: str, capsys: pytest.CaptureFixture[str], unchanged: Callable[[Path], None]
) -> None:
    unchanged(EXAMPLE)
    code, out, err = _cli(["select", str(EXAMPLE), f"--budget={budget}"], capsys)
    _one_clear_line(code, err, phrase)
    assert out == ""


def test_cli_huge_budget_gives_the_whole_conversation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(["select", str(EXAMPLE), "--budget", str(10**30)], capsys)
    assert code == 0, err
    assert json.loads(out) == json.loads(EXAMPLE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("case", "name", "content", "phrase"), CONFIG_FILES, ids=CONFIG_IDS)
def test_cli_bad_config_files(
    tmp_path: Path,
    case: str,
    name: str,
    content: bytes,
    phrase: str,
    capsys: pytest.CaptureFixture[str],
    unchanged: Callable[[Path], None],
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    unchanged(path)
    unchanged(EXAMPLE)
    code, out, err = _cli(["select", str(EXAMPLE), "--config", str(path)], capsys)
    _one_clear_line(code, err, CLI_CONFIG_PHRASES.get(case, phrase))
    assert out == ""


@pytest.mark.parametrize(
    ("arguments", "phrase"),
    [
        (["--config", "{tmp}"], "is a directory"),
        (["--config", "{tmp}/missing.toml"], "does not exist"),
        (["-b", "100", "-o", "colour=red"], "--option 'colour': not an option of strategy"),
        (["-b", "100", "-o", "novalue"], "--option wants KEY=VALUE"),
        (["-b", "100", "-o", "=5"], "--option wants KEY=VALUE"),
        (["-b", "100", "-o", "time_limit=NaN"], "seconds, got nan"),
        (["-b", "100", "-o", "time_limit=[1]"], "got list [1]"),
        (["-b", "100", "-o", "budget=5"], "use --budget instead"),
        (["-b", "100", "-s", "nope"], "unknown strategy 'nope'"),
        (["-b", "100", "-s", ""], "unknown strategy ''"),
        (["-b", "100", "-c", "nope"], "unknown token counter 'nope'"),
        (["-b", "100", "-c", "hf:{tmp}"], "hf counter"),
        (["-b", "2"], "need"),
        ([], "pass --budget N"),
        (["-b", "100", "--bogus"], "unrecognized arguments: --bogus"),
        (["-b"], "expected one argument"),
        (["-b", "2000", "-O", "{tmp}"], "Is a directory"),
    ],
)
def test_cli_bad_arguments(
    tmp_path: Path,
    arguments: list[str],
    phrase: str,
    capsys: pytest.CaptureFixture[str],
    unchanged: Callable[[Path], None],
) -> None:
    unchanged(EXAMPLE)
    argv = ["select", str(EXAMPLE), *(a.replace("{tmp}", str(tmp_path)) for a in arguments)]
    code, _, err = _cli(argv, capsys)
    _one_clear_line(code, err, phrase)


@pytest.mark.parametrize(
    "argv",
    [
        ["bogus"],
        ["strategies", "extra"],
        ["plugins", "--what"],
        ["select"],
    ],
    ids=" ".join,
)
def test_cli_usage_errors_are_one_line_too(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(argv, capsys)
    assert code == cli.EXIT_USAGE
    _one_clear_line(code, err, "--help")


@pytest.mark.parametrize("flag", ["--output", "--record"])
@pytest.mark.parametrize("victim", ["messages", "config"])
def test_cli_never_writes_over_an_input(
    tmp_path: Path,
    flag: str,
    victim: str,
    capsys: pytest.CaptureFixture[str],
    unchanged: Callable[[Path], None],
) -> None:
    messages = tmp_path / "messages.json"
    messages.write_bytes(EXAMPLE.read_bytes())
    config = tmp_path / "ctxwindow.toml"
    config.write_text('strategy = "newest"\nbudget = 500\n', encoding="utf-8")
    unchanged(messages)
    unchanged(config)
    target = messages if victim == "messages" else config
    argv = ["select", str(messages), "--config", str(config), flag, str(target)]
    code, out, err = _cli(argv, capsys)
    _one_clear_line(code, err, "never overwrites its input")
    assert out == ""


def test_cli_record_and_output_are_different_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = str(tmp_path / "out.json")
    code, _, err = _cli(["select", str(EXAMPLE), "-b", "500", "-O", same, "--record", same], capsys)
    _one_clear_line(code, err, "--record")


def test_cli_lone_surrogates_come_out_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "messages.json"
    source.write_bytes(b'[{"role": "user", "content": "half \\ud800 a pair"}]')
    code, out, err = _cli(["select", str(source), "--budget", "100"], capsys)
    assert code == 0, err
    assert "\\ud800" in out
    assert json.loads(out) == [{"role": "user", "content": "half \ud800 a pair"}]


# -- the CLI as a user runs it -----------------------------------------------------------
def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwindow", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("case", ["random-bytes", "deeply-nested", "utf16-le-bom"])
def test_cli_subprocess_one_line_and_traceback_only_with_debug(tmp_path: Path, case: str) -> None:
    content = {c: b for c, b, _ in MESSAGE_FILES}[case]
    source = tmp_path / "messages.json"
    source.write_bytes(content)
    result = _run("select", str(source), "--budget", "100")
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    debug = _run("--debug", "select", str(source), "--budget", "100")
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr
    assert source.read_bytes() == content


def test_cli_subprocess_usage_error_is_one_line() -> None:
    result = _run("select", str(EXAMPLE), "--budget", "NaN")
    assert result.returncode == cli.EXIT_USAGE
    assert result.stderr.splitlines() == [
        "ctxwindow: error: argument --budget/-b: invalid int value: 'NaN' "
        "(see `ctxwindow select --help`)"
    ]


def test_cli_a_file_name_with_a_line_break_is_still_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "two\nlines.json"
    source.write_bytes(b"[1")
    code, _, err = _cli(["select", str(source), "--budget", "100"], capsys)
    _one_clear_line(code, err, "is not valid JSON")
    code, _, err = _cli(["select", str(tmp_path / "gone\nmissing.json"), "-b", "100"], capsys)
    _one_clear_line(code, err, "does not exist")
