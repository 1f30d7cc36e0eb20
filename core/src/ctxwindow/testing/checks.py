"""An independent check of the contract, for tests.

Written apart from the runner's own checker on purpose: it
recomputes everything from the input, so a bug in the host cannot hide a bug in a
strategy, or the other way round.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxwindow import Message, Strategy, Window, Windower, get_counter
from ctxwindow._messages import read_message
from ctxwindow._tokens import NON_TEXT_PART_TOKENS, non_text_parts
from ctxwindow._visit import MIN_CUT_TOKENS, OVERSIZED_SHARE, TOOL_CUT_MARKER, TRUNCATION_MARKER
from ctxwindow.errors import BudgetTooSmall, OrphanToolResult
from ctxwindow.kit import covers_position

CUT_MARK = "characters cut by ctxwindow"
#: A tool result's roles: a tool's, and a legacy function_call's result (``function``).
RESULT_ROLES = ("tool", "function")
#: More than a cut tool result costs at its least (its marker): BudgetTooSmall under a
#: cutting policy is right only when the tool results cut to this still do not fit.
CUT_TOKENS = 80


def _as_message(item: Any) -> Message:
    return item if isinstance(item, Message) else read_message(item, None)


def must_keep_positions(messages: Sequence[Message]) -> set[int]:
    """System, developer and pinned messages, the newest user message, and their units."""
    keep = {i for i, m in enumerate(messages) if m.role in ("system", "developer") or m.pinned}
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if users:
        keep.add(users[-1])
    return keep


def _whole_units(messages: Sequence[Message], broken: set[int]) -> list[set[int]]:
    """Every message but the broken ones, as the units they are sent in, in order."""
    grouped = {i: group for group in tool_groups(messages) for i in group}
    units: list[set[int]] = []
    for i in range(len(messages)):
        if i in broken or (i in grouped and i != min(grouped[i])):
            continue
        units.append(grouped.get(i, {i}))
    return units


def _tiers(
    messages: Sequence[Message],
    broken: set[int],
    limit: int,
    cost: Any,
    task: bool,
    policy: str,
    count: Callable[[Message], int],
) -> tuple[set[int], set[int], set[int]]:
    """What must stay, in the contract's tiers, the current turn's positions, and the
    positions a held turn may hold beyond them (where this account cannot tell whether
    the runner holds it: then either is right). The tiers: the base (instructions,
    pins, the newest user message, whole units); the rest of the current turn (from the
    newest user message; with none, in an agent's history, from the first unit after
    the leading system and developer messages) if it fits, or (under a cutting
    ``policy``) if it fits with its older rounds' oversized tool results (over half the
    limit; under 'truncate' the newest user message too, if that big) cut to 64 tokens,
    its newest exchange whole and older context keeping a quarter, else its
    newest tool exchange; the task statement (the first user message) if it fits and
    costs at most a quarter of the limit."""
    units = _whole_units(messages, broken)
    keep: set[int] = set()
    base = must_keep_positions(messages) - broken
    for unit in units:
        if unit & base:
            keep |= unit
    users = [i for i, m in enumerate(messages) if m.role == "user" and i not in broken]
    # the turn starts at the newest user message; with none, in an agent's history,
    # after the instructions
    instruction = ("system", "developer")
    agent = any(m.tool_calls or m.function_call is not None for m in messages)
    starts = users[-1:] or [
        min(u) for u in units if agent and any(messages[i].role not in instruction for i in u)
    ]
    turn_units = [u for u in units if starts and min(u) >= starts[0]]
    turn = set().union(*turn_units) if turn_units else set()
    rest = [u for u in turn_units if not u <= keep]
    maybe: set[int] = set()
    if rest and cost(keep | set().union(*rest)) <= limit:
        keep |= set().union(*rest)
    else:  # the newest exchange, whether or not kept already (pinned, say)
        exchanges = [u for u in turn_units if any(_in_exchange(messages[i]) for i in u)]
        newest = exchanges[-1] if exchanges else set()
        if rest and policy != "raise":
            request = users[-1] if policy == "truncate" and users else None
            held = _fits_cut(messages, units, keep, turn, newest, limit, cost, count, request)
            if held:
                keep |= turn
            elif held is None:
                maybe = turn - keep - newest
        keep |= newest
    if task and users and not maybe:  # a turn that may be held may leave no room for it
        first = next(u for u in units if users[0] in u)
        size = cost(first)
        if not first <= keep and cost(keep) + size <= limit and size <= limit // 4:
            keep |= first
    return keep, turn, maybe


def _fits_cut(
    messages: Sequence[Message],
    units: list[set[int]],
    keep: set[int],
    turn: set[int],
    newest: set[int],
    limit: int,
    cost: Callable[[set[int]], int],
    count: Callable[[Message], int],
    request: int | None,
) -> bool | None:
    """Whether the whole current turn fits with the oversized tool results of its older
    rounds (over half the limit; and the message at ``request``, if that big) cut to 64
    tokens, its ``newest`` exchange whole, beside what must stay before it and, when
    there is older context, its quarter of the limit; never when no older result is
    that big. A cut message costs no less than its marker alone. None when that turns
    on what a cut keeps of a message of parts (an image)."""
    big = limit // OVERSIZED_SHARE
    older = any(not u & (keep | turn) for u in units)
    room = limit - cost(keep - turn) - (limit // 4 if older else 0)
    needed, oversized, unsure = 0, False, False
    for i in turn:
        size = cost({i})
        result = i not in newest and messages[i].role in RESULT_ROLES
        if (result or i == request) and size > big:
            oversized = oversized or result
            if isinstance(messages[i].content, str):
                size = max(MIN_CUT_TOKENS, _marked_cost(messages[i], count, result))
            else:  # parts: what a cut keeps of them is not this account's to price
                unsure, size = True, MIN_CUT_TOKENS
        needed += size
    if not oversized or needed > room:  # the runner's marker costs are no less: it agrees
        return False
    return None if unsure else True


def _marked_cost(message: Message, count: Callable[[Message], int], result: bool) -> int:
    """What ``message`` costs cut to its marker alone (the runner's documented marker:
    a tool result's says it is one), its other fields (a call id, a name) kept."""
    removed = len(message.text)
    marker = (TOOL_CUT_MARKER if result else TRUNCATION_MARKER).format(removed=removed)
    return count(dataclasses.replace(message, content=marker))


def _in_exchange(message: Message) -> bool:
    """A call or a result: tool calls or a legacy function_call, or their results."""
    return bool(
        message.tool_calls or message.function_call is not None or message.role in RESULT_ROLES
    )


def tool_groups(messages: Sequence[Message]) -> list[set[int]]:
    """Each assistant call with all its results right after it, found by call id; and
    each legacy function_call with the ``function`` result right after it that names
    its function (sent together, as a tool call with its results)."""
    groups = [group for group, answered in _exchanges(messages) if answered]
    legacy = [
        {i, i + 1}
        for i, message in enumerate(messages[:-1])
        if message.function_call is not None
        and messages[i + 1].role == "function"
        and messages[i + 1].name == message.function_call.name
    ]
    return sorted(groups + legacy, key=min) if legacy else groups


def broken_positions(messages: Sequence[Message]) -> set[int]:
    """Messages that cannot be sent: a call missing a result (with the results it has),
    and a tool result that answers no call just before it."""
    broken: set[int] = set()
    for group, answered in _exchanges(messages):
        if not answered:
            broken |= group
    grouped = set().union(*(group for group, _ in _exchanges(messages)))
    broken |= {i for i, m in enumerate(messages) if m.role == "tool" and i not in grouped}
    return broken


def _exchanges(messages: Sequence[Message]) -> list[tuple[set[int], bool]]:
    """Each assistant call with the results that follow it, and whether all came."""
    found = []
    for i, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            pending = {call.id for call in message.tool_calls}
            members = {i}
            j = i + 1
            while (
                pending
                and j < len(messages)
                and messages[j].role == "tool"
                and messages[j].tool_call_id in pending
            ):
                pending.discard(messages[j].tool_call_id or "")
                members.add(j)
                j += 1
            found.append((members, not pending))
    return found


def check_window(
    strategy: Strategy,
    messages: list[Any],
    budget: int,
    counter: str = "approx",
    query: str | None = None,
) -> Window[Any] | None:
    """Run ``strategy`` once (through a :class:`~ctxwindow.Windower`, as every visit
    runs) and assert every promise of the contract.

    Returns the window, or None when the strategy rightly raised BudgetTooSmall (or
    OrphanToolResult for a history with a broken tool exchange).
    """
    return checked_outcome(strategy, messages, budget, counter, query)[0]


def checked_outcome(
    strategy: Strategy,
    messages: list[Any],
    budget: int,
    counter: str = "approx",
    query: str | None = None,
) -> tuple[Window[Any] | None, str]:
    """:func:`check_window`, also saying how the visit ended: ``"window"``, or the name
    of the error the strategy rightly raised (for counting what generated cases hit)."""
    before = copy.deepcopy(messages)
    token_counter = get_counter(counter)
    parsed = [_as_message(m) for m in messages]
    total = sum(token_counter.count_message(m) for m in parsed)
    broken = broken_positions(parsed)
    groups = tool_groups(parsed)
    limit = budget - getattr(strategy, "overhead_tokens", 0)
    options = getattr(strategy, "options", {})
    policy = options.get("oversize", "cut")

    def cost(positions: set[int]) -> int:
        return sum(token_counter.count_message(parsed[i]) for i in positions)

    task = options.get("task_statement", True)
    keep, turn, maybe = _tiers(
        parsed, broken, limit, cost, task, policy, token_counter.count_message
    )
    needed = cost(keep)
    cuttable = {i for i in (keep | maybe) & turn if parsed[i].role in RESULT_ROLES}
    try:
        window = Windower(strategy, budget, counter).select(messages, query=query)
    except OrphanToolResult:
        assert broken, "OrphanToolResult raised for a history without a broken tool exchange"
        assert messages == before, "input changed"
        return None, "OrphanToolResult"
    except BudgetTooSmall as error:
        assert needed > limit, f"BudgetTooSmall raised though must-keep needs {needed} <= {limit}"
        if policy != "raise":  # cutting each tool result to a short head and tail was no help
            # each cut to its marker, its images kept (a cut keeps non-text parts)
            least = cost(keep - cuttable) + sum(
                CUT_TOKENS + NON_TEXT_PART_TOKENS * non_text_parts(parsed[i]) for i in cuttable
            )
            assert least > limit, f"BudgetTooSmall raised though cutting tool results fits {limit}"
        assert error.needed <= needed, (
            f"BudgetTooSmall says {error.needed}, must-keep needs {needed} before any cut"
        )
        assert messages == before, _mutated(before, messages)
        return None, "BudgetTooSmall"
    assert messages == before, _mutated(before, messages)
    assert isinstance(window, Window), f"select() returned {type(window).__name__}"

    sequence = _reading(messages, window.messages, keep)
    positions: list[int] = []
    tokens = 0
    cut_copies = 0
    for index, item in enumerate(window.messages):
        message = _as_message(item)
        tokens += token_counter.count_message(message)
        if sequence[index] is None:  # made, or a stand-in for an input message
            sequence[index] = _stood_in_for(message, parsed, keep, cuttable)
        position = sequence[index]
        if position is not None:
            positions.append(position)
            continue
        assert type(item) is type(messages[0]), "made messages must be of the input's kind"
        if message.role == "user" and CUT_MARK in message.text:
            cut_copies += 1
        else:
            assert message.synthetic, (
                f"window holds a message not in the input and not synthetic: {item!r}"
            )
            assert message.role != "tool" and not message.tool_calls, (
                f"a made message cannot be half of a tool exchange: {item!r}"
            )
    assert positions == sorted(set(positions)), f"order broken or duplicates: {positions}"
    assert cut_copies <= 1, "only the newest user message may be cut"
    kept = set(positions)
    newest_user = max((i for i, m in enumerate(parsed) if m.role == "user"), default=None)
    _check_made_placement(parsed, window, sequence, newest_user, min(turn, default=None))
    if cut_copies:
        assert newest_user is not None and newest_user not in kept
        kept_or_cut = kept | {newest_user}
    else:
        kept_or_cut = kept
    missing = keep - kept_or_cut
    assert not missing, f"must-keep messages dropped: {sorted(missing)}"
    for group in groups:
        assert not (group & kept) or group <= kept, f"tool unit split: {sorted(group)} vs kept"
        if group <= kept:
            places = [i for i, p in enumerate(sequence) if p in group]
            assert places == list(range(places[0], places[0] + len(places))), (
                f"a made message sits inside tool unit {sorted(group)}"
            )
    orphans = [i for i in kept if parsed[i].role == "tool" and not any(i in g for g in groups)]
    assert not orphans, f"tool results without their call: {orphans}"
    assert not kept & broken, f"broken tool exchanges sent: {sorted(kept & broken)}"
    assert tokens <= limit, f"window costs {tokens} tokens, over the limit {limit}"
    assert window.record.tokens_after == tokens, (
        f"record says {window.record.tokens_after} tokens, window costs {tokens}"
    )
    assert window.record.tokens_before == total
    if not window.record.engaged:
        assert [id(m) for m in window.messages] == [id(m) for m in messages], (
            "the record says it did not engage, yet the window differs from the input"
        )
    engages_anyway = getattr(strategy, "engages_within_budget", None)
    if total <= limit and engages_anyway is None:
        assert window.record.engaged is False, "everything fits, yet the strategy engaged"
    _check_record(window, messages, kept_or_cut)
    record = window.record
    assert record.strategy == strategy.name, f"record names {record.strategy!r}"
    assert record.budget == budget, f"record says budget {record.budget}, given {budget}"
    assert record.counter == token_counter.name, f"record says counter {record.counter!r}"
    assert (record.messages_before, record.messages_after) == (
        len(messages),
        len(window.messages),
    ), "the record's message counts differ from the input and the window"
    assert record.elapsed_ms >= 0
    json.dumps(record.to_dict())  # the record is plain data, as `--record` writes it
    return window, "window"


def _check_made_placement(
    parsed: Sequence[Message],
    window: Window[Any],
    sequence: Sequence[int | None],
    newest_user: int | None,
    turn_start: int | None = None,
) -> None:
    """Each made message (not a stand-in) that says what it covers (``metadata.covers``)
    sits where that was: no kept message before it newer than the newest message it
    covers, none after it older than the oldest. ``covers`` is a list or tuple of
    references (``#position``, a message id, or a position) naming at least one input
    message. None sits after the current turn's start (``turn_start``: the newest user
    message; with none, in an agent's history, its first message after the
    instructions) unless all it covers is from there on (the turn's own older rounds),
    and none ends a window whose last message is of the turn unless it stands for a
    message after that one: the request ends with what the user asked and the
    exchanges that answer it. Units recorded as summarized
    need a made message standing for them."""
    if turn_start is None:
        turn_start = newest_user
    ids: dict[str, int] = {}
    for position, message in enumerate(parsed):
        if message.id is not None:
            ids.setdefault(message.id, position)
    made: dict[int, Message] = {}  # by window index
    for index, slot in enumerate(sequence):
        if slot is None:
            message = _as_message(window.messages[index])
            if not (message.role == "user" and CUT_MARK in message.text):
                made[index] = message
    # what each window slot is in the input (a cut copy of the newest user message is it)
    places = [
        newest_user if p is None and index not in made else p for index, p in enumerate(sequence)
    ]
    if any(d.action == "summarized" for d in window.record.decisions):
        assert made, "units are recorded as summarized but no made message stands for them"
    for index, message in made.items():
        before = [p for p in places[:index] if p is not None]
        after = [p for p in places[index + 1 :] if p is not None]
        span = _covered_span(message, parsed, ids)
        if turn_start is not None and before and max(before) >= turn_start:
            where = "the newest user message" if turn_start == newest_user else "the turn's start"
            covered = "nothing" if span is None else span
            assert span is not None and span[0] >= turn_start, (
                f"a made message sits after {where} (message {turn_start}) and covers "
                f"{covered}: only a summary of the current turn's own older rounds may go "
                f"after it: {message!r}"
            )
            assert after or span[1] > max(before), (
                f"a made message ends the window, after the current turn (from message "
                f"{turn_start}), and stands for nothing after its last message: the request "
                f"ends with the turn's exchanges: {message!r}"
            )
        if span is None:
            continue
        low, high = span
        assert not before or max(before) <= high, (
            f"a made message covering messages {low}-{high} sits after message "
            f"{max(before)}: a summary goes where what it covers was"
        )
        assert not after or min(after) >= low, (
            f"a made message covering messages {low}-{high} sits before message "
            f"{min(after)}: a summary goes where what it covers was"
        )


def _covered_span(
    message: Message, parsed: Sequence[Message], ids: Mapping[str, int]
) -> tuple[int, int] | None:
    """The first and last input position a made message's ``metadata.covers`` names;
    None when it has no ``covers``. A ``covers`` of another shape, or naming no input
    message, fails: such a summary could sit anywhere."""
    if "covers" not in message.metadata:
        return None
    covers = message.metadata["covers"]
    assert isinstance(covers, (list, tuple)), (
        f"metadata.covers must be a list or tuple of references, got "
        f"{type(covers).__name__}: {message!r}"
    )
    found = []
    for ref in covers:
        position = covers_position(ref)
        if position is not None:
            position = position if position < len(parsed) else None
        elif isinstance(ref, str):
            position = ids.get(ref)
        else:
            assert type(ref) is int, (
                f"metadata.covers holds {ref!r}, not a message id, '#position' or position"
            )
            position = ref if 0 <= ref < len(parsed) else None
        if position is not None:
            found.append(position)
    assert found, f"metadata.covers names no input message: {message!r}"
    return min(found), max(found)


def _stood_in_for(
    message: Message, parsed: Sequence[Message], keep: set[int], cuttable: set[int]
) -> int | None:
    """The input position a stand-in replaces (``metadata.stands_in_for``): a strategy's
    (marked synthetic, never for a must-keep message) or the runner's cut of a current
    turn's tool result or of the newest user message (marked truncated, with the cut
    marker); checked to keep what pairs a tool exchange. None for any other made
    message."""
    position = message.metadata.get("stands_in_for")
    if type(position) is not int or not 0 <= position < len(parsed):
        return None
    original = parsed[position]
    if message.metadata.get("truncated"):
        if original.role == "user":
            newest = max(i for i, m in enumerate(parsed) if m.role == "user")
            assert position == newest, f"message {position} is not the newest user message"
        else:
            assert position in cuttable, (
                f"message {position} is not a tool result the runner may cut"
            )
        assert CUT_MARK in message.text, f"a cut message must say so: {message!r}"
    else:
        assert message.synthetic, f"a stand-in must be marked synthetic: {message!r}"
        assert position not in keep, f"must-keep message {position} was replaced"
    assert (message.role, message.tool_call_id) == (original.role, original.tool_call_id), (
        f"a stand-in must keep the role and tool_call_id of message {position}"
    )
    assert [(c.id, c.name) for c in message.tool_calls] == [
        (c.id, c.name) for c in original.tool_calls
    ], f"a stand-in must keep the tool calls of message {position}"
    calls = [m.function_call.name if m.function_call else None for m in (message, original)]
    assert calls[0] == calls[1], (
        f"a stand-in must keep the legacy function_call of message {position}"
    )
    return position


def _check_record(window: Window[Any], messages: Sequence[Any], kept: set[int]) -> None:
    size = len(messages)
    seen: list[int] = []
    recorded_kept: set[int] = set()
    for decision in window.record.decisions:
        assert decision.reason, f"decision without a reason: {decision}"
        assert decision.action in ("kept", "dropped", "summarized", "truncated", "replaced")
        seen.extend(decision.positions)
        if decision.action in ("kept", "truncated", "replaced"):
            recorded_kept.update(decision.positions)
    assert sorted(seen) == list(range(size)), "the record must account for every message once"
    if len({id(m) for m in messages}) < size:
        # one object at several positions: which of them the window holds is a matter of
        # reading, so compare the objects kept, each as often as it is kept
        def objects(positions: set[int]) -> list[int]:
            return sorted(id(messages[p]) for p in positions)

        assert objects(recorded_kept) == objects(kept), (
            f"the record keeps positions {sorted(recorded_kept)}, the window holds {sorted(kept)}"
        )
        return
    assert recorded_kept >= kept, "the record says dropped for a message in the window"
    assert recorded_kept == kept, (
        f"the record says kept for messages not in the window: {sorted(recorded_kept - kept)}"
    )


def _reading(messages: Sequence[Any], window: Sequence[Any], keep: set[int]) -> list[int | None]:
    """Each window item's position in the input (None: not in it). When the input holds
    one object more than once, the reading that keeps order and must-keep messages."""
    places: dict[int, list[int]] = {}
    for position, message in enumerate(messages):
        places.setdefault(id(message), []).append(position)
    if all(len(found) == 1 for found in places.values()):
        return [places[id(item)][0] if id(item) in places else None for item in window]
    best = _matched_best(window, places, keep)
    if best is not None:  # in order, and no in-order reading holds more must-keep ones
        return best
    readings = [_matched(window, places, latest) for latest in (True, False)]

    def badness(reading: list[int | None]) -> tuple[bool, int]:
        found = [p for p in reading if p is not None]
        return found != sorted(set(found)), len(keep - set(found))

    return min(readings, key=badness)


def _matched_best(
    window: Sequence[Any], places: dict[int, list[int]], keep: set[int]
) -> list[int | None] | None:
    """The in-order reading that holds the most must-keep positions (None: no reading
    keeps order). An object the input holds three times, of which the window holds
    two, may stand for positions 1 and 3: reading from either end finds 1 and 2, or 2
    and 3, and would blame the strategy for a must-keep message it kept.

    Read from the last item back, each item's readings of the items from it on kept
    as the few that no other beats (a later position, or more must-keep ones held):
    past a must-keep candidate, an item takes the latest position before the next
    item's, which leaves the most room. Near-linear in the window, however often the
    input repeats one object (each item's candidates are found by bisection)."""
    found = [(index, places[id(item)]) for index, item in enumerate(window) if id(item) in places]
    kept_of: dict[int, list[int]] = {}  # by id of a candidate list: its must-keep ones
    #: per item, from the last: (position, must-keep held from it on, link to the next's)
    steps: list[list[tuple[int, int, int]]] = []
    frontier: list[tuple[int, int, int]] = [(sys.maxsize, 0, -1)]
    for _, candidates in reversed(found):
        must = kept_of.get(id(candidates))
        if must is None:
            must = kept_of[id(candidates)] = [p for p in candidates if p in keep]
        here: list[tuple[int, int, int]] = []
        for link, (start, held, _) in enumerate(frontier):
            at = bisect.bisect_left(candidates, start) - 1
            while at >= 0 and candidates[at] in keep:  # the latest that is not must-keep
                at -= 1
            if at >= 0:
                here.append((candidates[at], held, link))
            here.extend((p, held + 1, link) for p in must if p < start)
        if not here:
            return None
        frontier = _unbeaten(here)
        steps.append(frontier)
    reading: list[int | None] = [None] * len(window)
    link = len(frontier) - 1  # the most must-keep positions held (the latest such start)
    for (index, _), step in zip(found, reversed(steps), strict=True):
        position, _, link = step[link]
        reading[index] = position
    return reading


def _unbeaten(states: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The states no other beats (one as late or later holding as many must-keep
    positions or more), latest first: each holds more than those before it."""
    states.sort(key=lambda state: (-state[0], -state[1]))
    kept: list[tuple[int, int, int]] = []
    for state in states:
        if not kept or state[1] > kept[-1][1]:
            kept.append(state)
    return kept


def _matched(window: Sequence[Any], places: dict[int, list[int]], latest: bool) -> list[int | None]:
    """Match items to positions in order: from the end taking the latest free position
    before the next item's, or from the start taking the earliest after the last one's."""
    taken: set[int] = set()
    reading: list[int | None] = [None] * len(window)
    indices = list(range(len(window)))
    limit = None
    for index in reversed(indices) if latest else indices:
        found = places.get(id(window[index]))
        if not found:
            continue
        free = [p for p in found if p not in taken] or found
        if latest:
            fits = [p for p in free if limit is None or p < limit]
            position = (fits or free)[-1]
        else:
            fits = [p for p in free if limit is None or p > limit]
            position = (fits or free)[0]
        taken.add(position)
        reading[index] = limit = position
    return reading


def _mutated(before: Sequence[Any], after: Sequence[Any]) -> str:
    """What a strategy changed in the caller's list: the first message that differs and
    how (a key added, removed or changed), for the author to find the line that did it."""
    if len(before) != len(after):
        return f"input was mutated: the list had {len(before)} messages, now {len(after)}"
    for position, (old, new) in enumerate(zip(before, after, strict=True)):
        if old == new:
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changed = sorted(
                key for key in {*old, *new} if old.get(key, _ABSENT) != new.get(key, _ABSENT)
            )
            return (
                f"input was mutated: message {position}'s {', '.join(map(repr, changed))} "
                "changed (copy a message before changing it: dict(message), or "
                "dataclasses.replace for a Message)"
            )
        return f"input was mutated: message {position} changed"
    return "input was mutated"


_ABSENT = object()
