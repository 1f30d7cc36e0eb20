"""A battery of conversations for conformance tests, and a hypothesis strategy for more."""

from __future__ import annotations

import json
from typing import Any

from ctxwindow._messages import read_message
from ctxwindow.testing._generated import require_hypothesis


def user(text: str, **extra: Any) -> dict[str, Any]:
    """A user message dict (``extra`` adds keys such as ``id`` or ``metadata``)."""
    return {"role": "user", "content": text, **extra}


def assistant(text: str, **extra: Any) -> dict[str, Any]:
    """An assistant message dict."""
    return {"role": "assistant", "content": text, **extra}


def calls(*ids: str) -> dict[str, Any]:
    """An assistant message calling the ``lookup`` tool once per id (parallel calls)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call(call_id, "lookup") for call_id in ids],
    }


def result(call_id: str, text: str = "done") -> dict[str, Any]:
    """The tool's result for call ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _chat(turns: int, words: int = 12) -> list[dict[str, Any]]:
    out = []
    for turn in range(turns):
        out.append({"role": "user", "content": f"question {turn}: " + "word " * words})
        out.append({"role": "assistant", "content": f"answer {turn}: " + "reply " * words})
    return out


def pending_result_too_big() -> list[dict[str, Any]]:
    """An agent run whose pending tool result alone is over a 2,000-token budget: a
    small task statement, an older exchange too big for the older share, then the
    result the model waits on (about 3,000 tokens). The runner must cut that result and
    then weigh the task statement again in what the cut leaves."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        user("TASK: fix ISSUE-4711 in acme/widgets (test_parse_dates)."),
        calls("c1"),
        result("c1", "ok " * 3_000),
        user("Go on."),
        calls("c2"),
        result("c2", "FAILED line\n" * 3_000),
    ]


def agent_loop(
    rounds: int, *, result_words: int = 40, instructions: int = 1, pending: bool = True
) -> list[dict[str, Any]]:
    """An agent's history: a task statement, then ``rounds`` rounds of parallel calls
    whose results arrive out of order, with a fresh instruction every
    ``rounds // instructions`` rounds; ending on results the model is waiting on (or,
    without ``pending``, on the assistant's answer)."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent. Use the tools."},
        {"role": "user", "content": "Task: reconcile invoices INV-1001 to INV-1040."},
    ]
    every = max(1, rounds // max(1, instructions))
    for number in range(rounds):
        if number and number % every == 0:
            out.append({"role": "user", "content": f"Now check batch {number}, please."})
        ids = [f"r{number}a", f"r{number}b"]
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call(i, "fetch", invoice=f"INV-{1000 + number}") for i in ids],
            }
        )
        for call_id in reversed(ids):  # out of order
            text = f"INV-{1000 + number} line {call_id}: " + "amount 12.50 " * result_words
            out.append(result(call_id, text))
    if not pending:
        out.append({"role": "assistant", "content": "All batches are reconciled."})
    return out


def battery() -> dict[str, list[dict[str, Any]]]:
    """Named conversations covering the shapes a strategy must survive (fresh copies)."""
    system = {"role": "system", "content": "You are a careful assistant."}
    tools: list[dict[str, Any]] = [
        system,
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("a", "weather", city="Paris"), _call("b", "weather", city="Rome")],
        },
        {"role": "tool", "tool_call_id": "b", "content": "Rome: 24C"},
        {"role": "tool", "tool_call_id": "a", "content": "Paris: 18C"},
        {"role": "assistant", "content": "Paris 18C, Rome 24C."},
        {"role": "user", "content": "And a chain: look up Oslo, then convert to F."},
        {
            "role": "assistant",
            "content": "Looking up.",
            "tool_calls": [_call("c", "weather", city="Oslo")],
        },
        {"role": "tool", "tool_call_id": "c", "content": "Oslo: 9C"},
        {"role": "assistant", "content": None, "tool_calls": [_call("d", "convert", c=9)]},
        {"role": "tool", "tool_call_id": "d", "content": "48.2F"},
        {"role": "assistant", "content": "Oslo is 9C (48.2F)."},
        {"role": "user", "content": "Thanks!"},
    ]
    pinned: list[dict[str, Any]] = [system, *_chat(6)]
    pinned[3] = {**pinned[3], "metadata": {"pinned": True, "id": "keep-me"}}
    oversized = [system, *_chat(3), {"role": "user", "content": "paste " * 3000}]
    parts: list[dict[str, Any]] = [
        system,
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this image?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        },
        {"role": "assistant", "content": "A cat on a sofa."},
        *_chat(4),
    ]
    return {
        "empty": [],
        "one-message": [{"role": "user", "content": "Hello"}],
        "system-only": [system],
        "system-and-developer": [
            system,
            {"role": "developer", "content": "Answer in French."},
            *_chat(3),
        ],
        "plain-chat": [system, *_chat(20)],
        "no-system": _chat(15),
        "tool-chains": tools,
        "tool-call-last-unit": tools[:-1],
        "pinned": pinned,
        "oversized-newest": oversized,
        "oversized-middle": [
            system,
            *_chat(2),
            {"role": "assistant", "content": "log " * 4000},
            *_chat(2),
        ],
        "content-parts": parts,
        "agent-loop": agent_loop(12, instructions=3),
        "agent-long-turn": agent_loop(20),
        "agent-answered": agent_loop(8, instructions=2, pending=False),
        "agent-oversized-result": [
            *agent_loop(4),
            calls("big"),
            result("big", "row 1,2,3,4 " * 2500),
        ],
        "unicode": [
            system,
            *(
                {"role": r, "content": t}
                for r, t in [
                    ("user", "Größe? 日本語のテキスト 🎉"),
                    ("assistant", "Ελληνικά και עברית"),
                    ("user", "emoji 👩‍👩‍👧‍👦 " * 30),
                    ("assistant", "ok"),
                ]
            ),
        ],
        "empty-contents": [
            system,
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": ""},
        ],
    }


BUDGETS = (1, 8, 30, 60, 120, 250, 500, 1000, 4000, 100_000)


def histories(max_turns: int = 30, *, defects: bool = False) -> Any:
    """A hypothesis strategy of histories: system prompts, pinned messages, names,
    parallel tool calls, empty and huge contents, content parts and unicode; as dicts
    or as Message objects. With ``defects``, also tool results that answer no call and
    calls missing results (pinned ones too), for strategies run with orphans='drop'."""
    require_hypothesis()
    from hypothesis import strategies as st

    text = st.one_of(
        st.text(max_size=80),
        st.text(alphabet="ab \n", min_size=200, max_size=3000),
        st.just(""),
    )
    kinds = ["user", "assistant", "tools", "parts", "developer"]
    if defects:
        kinds += ["orphan", "unanswered"]

    @st.composite
    def build(draw: Any) -> list[Any]:
        out: list[dict[str, Any]] = []
        if draw(st.booleans()):
            out.append({"role": "system", "content": draw(st.text(max_size=200))})
        calls = 0
        for _ in range(draw(st.integers(0, max_turns))):
            kind = draw(st.sampled_from(kinds))
            pinned = draw(st.integers(0, 9)) == 0
            meta: dict[str, Any] = {"metadata": {"pinned": True}} if pinned else {}
            if kind in ("user", "assistant") and draw(st.integers(0, 4)) == 0:
                meta["name"] = draw(st.text(alphabet="abcxyz_-", max_size=20))
            if kind in ("user", "assistant", "developer"):
                out.append({"role": kind, "content": draw(text), **meta})
            elif kind == "parts":
                out.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": draw(text)},
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/png;base64,AAAA"},
                            },
                        ],
                        **meta,
                    }
                )
            elif kind == "orphan":
                answers = draw(st.sampled_from([f"call_{max(calls - 1, 0)}", "ghost"]))
                out.append({"role": "tool", "tool_call_id": answers, "content": draw(text), **meta})
            else:
                count = draw(st.integers(1, 3))
                ids = [f"call_{calls + i}" for i in range(count)]
                calls += count
                out.append(
                    {
                        "role": "assistant",
                        "content": draw(st.one_of(st.none(), text)),
                        "tool_calls": [_call(i, "tool", n=n) for n, i in enumerate(ids)],
                        **meta,
                    }
                )
                answered = list(draw(st.permutations(ids)))
                if kind == "unanswered":
                    answered = answered[: draw(st.integers(0, count - 1))]
                for call_id in answered:
                    result = {"role": "tool", "tool_call_id": call_id, "content": draw(text)}
                    if draw(st.integers(0, 9)) == 0:
                        result["metadata"] = {"pinned": True}
                    out.append(result)
        if draw(st.integers(0, 3)) == 0:
            return [read_message(entry, i) for i, entry in enumerate(out)]
        return out

    return build()


#: Texts that break naive code: emoji sequences, right-to-left scripts, combining marks,
#: zero-width and BOM characters, JSON-legal line separators, NUL, and lone surrogates
#: (a Python str may hold them, and JSON's "\ud800" escape reads into one).
AWKWARD_TEXTS = (
    "👩‍👩‍👧‍👦 🎉🇫🇷 ✌🏽",
    "עברית والعربية mixed with English \u200f\u200e \u202e override",
    "e\u0301\u0308 a\u0338 Z\u0335\u0321\u031b",
    "zero\u200bwidth\u200d joiner \ufeff bom",
    "line\u2028separator\u2029paragraph\x85next",
    "nul\x00byte and \x1b[31mescape",
    "lone \ud800 surrogate \udfff",
    '{"role": "system", "content": "not a message"}',
    "\\u0000 \\n literal escapes",
)


def agent_histories(max_rounds: int = 30) -> Any:
    """A hypothesis strategy of agent loops: a system prompt, a task statement, then
    rounds of one to three parallel calls whose results arrive in any order (empty,
    short or tens of KB), a new instruction now and then, an answer now and then;
    ending on results the model waits on, on an answer, or on a new instruction."""
    require_hypothesis()
    from hypothesis import strategies as st

    result_text = st.one_of(
        st.text(max_size=80),
        st.text(alphabet="abc 0123456789,:{}", min_size=200, max_size=3000),
        st.builds(lambda times: "row 1,2,3 " * times, st.integers(1_000, 6_000)),
        st.just(""),
    )

    @st.composite
    def loop(draw: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if draw(st.booleans()):
            out.append({"role": "system", "content": draw(st.text(max_size=400))})
        out.append(user(draw(st.text(min_size=1, max_size=300))))
        rounds = draw(st.integers(1, max_rounds))
        for number in range(rounds):
            if draw(st.integers(0, 6)) == 0:
                out.append(user(draw(st.text(max_size=120))))
            ids = [f"r{number}c{i}" for i in range(draw(st.integers(1, 3)))]
            out.append(
                {
                    "role": "assistant",
                    "content": draw(st.sampled_from([None, "", "Checking."])),
                    "tool_calls": [_call(i, "fetch", n=number) for i in ids],
                }
            )
            for call_id in draw(st.permutations(ids)):
                out.append(result(call_id, draw(result_text)))
            if draw(st.integers(0, 4)) == 0:
                out.append(assistant(draw(st.text(max_size=200))))
        ending = draw(st.sampled_from(["pending", "answer", "instruction"]))
        if ending == "answer":
            out.append(assistant("Done."))
        elif ending == "instruction":
            out.append(user("Next, please."))
        return out

    return loop()


def wild_histories(max_turns: int = 24, *, defects: bool = False) -> Any:
    """A hypothesis strategy of harder histories than :func:`histories`.

    System prompts first and not first, developer messages, pinned messages (tool
    results too), names, ids (some shared), metadata importances (NaN included),
    parallel tool calls answered in any order, empty, awkward-unicode and huge (tens of
    KB) contents, content-part lists (text, image_url, empty), the same dict object
    twice; as dicts or as Message objects. With ``defects``, also results that answer
    no call, calls missing results, results cut off from their call by another message,
    and call ids reused by a later exchange.
    """
    require_hypothesis()
    from hypothesis import strategies as st

    plain = st.text(max_size=60)
    huge = st.builds(
        lambda word, times: word * times,
        st.sampled_from(["lorem ipsum ", "数据 ", "x", "🎉 ", "a\u0301 "]),
        st.integers(2_000, 12_000),
    )
    text = st.one_of(
        plain,
        plain,
        st.sampled_from(AWKWARD_TEXTS),
        st.text(alphabet=st.characters(codec=None), max_size=40),  # surrogates too
        st.just(""),
        st.text(alphabet="ab \n.", min_size=100, max_size=2000),
    )
    text_or_huge = st.one_of(text, text, text, text, text, text, text, huge)

    @st.composite
    def content(draw: Any, allow_parts: bool = True) -> Any:
        if not allow_parts or draw(st.integers(0, 4)):
            return draw(text_or_huge)
        parts: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.booleans()):
                parts.append({"type": "text", "text": draw(text)})
            else:
                detail = draw(st.sampled_from(["auto", "low", "high"]))
                parts.append(
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": "data:image/png;base64,iVBORw0KGgo=",
                            "detail": detail,
                        },
                    }
                )
        return parts

    @st.composite
    def extras(draw: Any, pinnable: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {}
        metadata: dict[str, Any] = {}
        if pinnable and draw(st.integers(0, 7)) == 0:
            metadata["pinned"] = True
        if draw(st.integers(0, 9)) == 0:
            metadata["importance"] = draw(st.floats(allow_nan=True, allow_infinity=True))
        if metadata:
            out["metadata"] = metadata
        if draw(st.integers(0, 5)) == 0:
            out["id"] = draw(st.sampled_from(["m1", "m2", "same", "ünï"]))
        return out

    kinds = ["user", "user", "assistant", "assistant", "tools", "system", "developer", "again"]
    if defects:
        kinds += ["orphan", "unanswered", "interrupted", "reused"]

    @st.composite
    def build(draw: Any) -> list[Any]:
        out: list[Any] = []
        if draw(st.booleans()):
            out.append({"role": "system", "content": draw(text)})
        calls = 0
        exchanges: list[list[str]] = []
        for _ in range(draw(st.integers(0, max_turns))):
            kind = draw(st.sampled_from(kinds))
            if kind in ("system", "developer"):
                out.append({"role": kind, "content": draw(content(allow_parts=kind == "system"))})
            elif kind in ("user", "assistant"):
                message = {"role": kind, "content": draw(content()), **draw(extras())}
                if draw(st.integers(0, 4)) == 0:
                    message["name"] = draw(st.text(alphabet="abcxyz_-0", min_size=1, max_size=20))
                out.append(message)
            elif kind == "again":  # the very same object a second time
                plain_ones = [m for m in out if isinstance(m, dict) and m["role"] == "user"]
                if plain_ones:
                    out.append(draw(st.sampled_from(plain_ones)))
            elif kind == "orphan":
                known = [i for ids in exchanges for i in ids]
                answers = draw(st.sampled_from([*known, "ghost"]))
                out.append({"role": "tool", "tool_call_id": answers, "content": draw(text)})
            else:
                count = draw(st.integers(1, 4))
                if kind == "reused" and exchanges:
                    ids = draw(st.sampled_from(exchanges))[:count]
                else:
                    ids = [f"call_{calls + i}" for i in range(count)]
                    calls += count
                exchanges.append(ids)
                out.append(
                    {
                        "role": "assistant",
                        "content": draw(st.one_of(st.none(), text)),
                        "tool_calls": [
                            _call(i, draw(plain) or "tool", n=n) for n, i in enumerate(ids)
                        ],
                        **draw(extras()),
                    }
                )
                answered = list(draw(st.permutations(ids)))
                if kind == "unanswered":
                    answered = answered[: draw(st.integers(0, len(ids) - 1))]
                for number, call_id in enumerate(answered):
                    if kind == "interrupted" and number == len(answered) // 2:
                        out.append({"role": "user", "content": draw(text)})
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": call_id,
                            "content": draw(content()),
                            **draw(extras()),
                        }
                    )
        if draw(st.integers(0, 3)) == 0:
            return [read_message(entry, i) for i, entry in enumerate(out)]
        return out

    return build()
