"""clear_tool_outputs: old, large tool results give way to a short note of what was removed.

Agents re-read every tool result on every turn, though most matter only for the turn
that asked for them. Clearing them keeps the conversation's shape (who asked what, which
tool ran) at a fraction of the tokens, before anything has to be dropped or summarized.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxwindow import BaseStrategy, History, Message, Option, Selection

STUB = "[tool output of {tool} ({call_id}) cleared by ctxwindow: {tokens:,} tokens]"
KEPT = "not an old, large tool output"
FITS_AFTER = "among the most recent units that fit once tool outputs were cleared"
DROPPED = "outside the most recent units that fit once tool outputs were cleared"


@dataclass(frozen=True)
class Clearing:
    """One tool exchange to clear: what stands for its results, and what it saves."""

    unit: int
    stubs: dict[int, Message]  # by position: the stand-ins for the cleared results
    tokens_before: int
    tokens_after: int
    reason: str


class ClearToolOutputs(BaseStrategy):
    """Replaces old, large tool results with a stub saying what was removed.

    A tool result older than the newest ``keep_recent`` results and costing at least
    ``min_tokens`` becomes ``[tool output of <tool> (<call id>) cleared by ctxwindow:
    <n> tokens]``: still a tool message answering the same call, which stays, so the
    exchange remains valid for every provider. A stub is made only where it is cheaper
    than the result. Alone it then drops the oldest units if the history
    still does not fit; as a ``pipeline`` stage before others it only clears (see
    :meth:`transform`) and leaves the fitting to the stages after it.
    """

    name = "clear_tool_outputs"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "keep_recent",
            int,
            3,
            "The newest this many tool results stay whole (counted in results, newest first).",
            minimum=0,
        ),
        Option(
            "min_tokens",
            int,
            100,
            "Only results costing at least this many tokens are cleared.",
            minimum=0,
        ),
        Option(
            "when",
            str,
            "over_budget",
            "'over_budget': clear only when the history exceeds the budget; 'always': "
            "also when everything fits (a leaner prompt that changes less from turn to turn).",
            choices=("over_budget", "always"),
        ),
    )

    def plan(self, history: History) -> list[Clearing]:
        """The exchanges to clear, oldest first: only those the stubs make cheaper."""
        keep_recent: int = self.options["keep_recent"]
        min_tokens: int = self.options["min_tokens"]
        seen = 0
        chosen: dict[int, list[int]] = {}
        for unit in range(len(history.units) - 1, -1, -1):
            span = history.span(unit)
            results = [p for p in span if history.messages[p].role == "tool"]
            for position in reversed(results):
                seen += 1
                if seen <= keep_recent or unit in history.must_keep:
                    continue
                if history.tokens(position) >= min_tokens:
                    chosen.setdefault(unit, []).append(position)
        return [
            clearing
            for unit in sorted(chosen)
            if (clearing := _clearing(history, unit, set(chosen[unit]))) is not None
        ]

    def engages_within_budget(self, history: History) -> bool:
        """With ``when='always'``, clear even though everything fits."""
        return self.options["when"] == "always" and bool(self.plan(history))

    def transform(self, history: History) -> Selection:
        """Clear, and keep everything else, even if the window is still over budget.

        What a ``pipeline`` calls when this is not its last stage: the stages after it
        fit the budget, with the cleared history as their input.
        """
        return self._select(history, self.plan(history), fit=False)

    def choose(self, history: History) -> Selection:
        return self._select(history, self.plan(history), fit=True)

    def _select(self, history: History, plan: list[Clearing], fit: bool) -> Selection:
        selection = history.selection()
        by_unit = {clearing.unit: clearing for clearing in plan}
        dropped: set[int] = set()
        if fit:
            total = history.usable_tokens - sum(c.tokens_before - c.tokens_after for c in plan)
            for unit in range(len(history.units)):
                if total <= history.budget:
                    break
                if unit in history.must_keep:
                    continue
                cleared = by_unit.get(unit)
                total -= cleared.tokens_after if cleared else history.unit_tokens(unit)
                dropped.add(unit)
        kept_reason = FITS_AFTER if dropped else KEPT
        for unit in range(len(history.units)):
            if unit in history.must_keep:
                continue
            if unit in dropped:
                selection.drop(unit, DROPPED)
            elif unit in by_unit:
                clearing = by_unit[unit]
                for position, stub in clearing.stubs.items():
                    selection.replace(position, stub, clearing.reason)
            else:
                selection.keep(unit, kept_reason)
        done = [c for c in plan if c.unit not in dropped]
        if done:
            before = sum(c.tokens_before for c in done)
            after = sum(c.tokens_after for c in done)
            selection.notes.append(
                f"cleared the tool output of {len(done)} exchange(s): "
                f"{before:,} -> {after:,} tokens"
            )
        return selection


def _clearing(history: History, unit: int, cleared: set[int]) -> Clearing | None:
    """How to clear ``cleared`` (results of ``unit``), or None if it saves nothing."""
    span = history.span(unit)
    call = history.messages[span.start]
    tools = {c.id: c.name for c in call.tool_calls}
    before = history.unit_tokens(unit)
    stubs: dict[int, Message] = {}
    details: dict[int, dict[str, Any]] = {}
    for position in sorted(cleared):
        result = history.messages[position]
        call_id = result.tool_call_id or ""
        tool = tools.get(call_id) or result.name or "a tool"
        details[position] = {
            "tool": tool,
            "tool_call_id": call_id,
            "position": position,
            "id": history.message_id(position),
            "tokens": history.tokens(position),
            "characters": len(result.text),
        }
        stub = replace(
            result,
            content=STUB.format(tool=tool, call_id=call_id, tokens=history.tokens(position)),
            metadata={
                **result.metadata,
                "synthetic": True,
                "cleared_tool_output": details[position],
            },
        )
        if history.counter.count_message(stub) < history.tokens(position):
            stubs[position] = stub
    if not stubs:
        return None
    named = ", ".join(
        f"{d['tool']} ({d['tool_call_id']})" for p, d in details.items() if p in stubs
    )
    after = before - sum(
        history.tokens(p) - history.counter.count_message(stub) for p, stub in stubs.items()
    )
    reason = f"tool output cleared: {named}; {before:,} -> {after:,} tokens"
    return Clearing(unit, stubs, before, after, reason)
