"""clear_tool_outputs: old, large tool results give way to a short note of what was removed.

Agents re-read every tool result on every turn, though most matter only for the turn
that asked for them. Clearing them keeps the conversation's shape (who asked what, which
tool ran) at a fraction of the tokens, before anything has to be dropped or summarized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ctxwindow import BaseStrategy, History, Message, Option, Selection

STUB = "[tool output of {tool} ({call_id}) cleared by ctxwindow: {tokens:,} tokens]"
#: Arguments longer than this are cut in the note; the call itself is not the point.
ARGUMENTS_SHOWN = 160
KEPT = "not an old, large tool output"
FITS_AFTER = "among the most recent units that fit once tool outputs were cleared"
DROPPED = "outside the most recent units that fit once tool outputs were cleared"


@dataclass(frozen=True)
class Clearing:
    """One tool exchange to clear: the note that stands for it, and what it saves."""

    unit: int
    note: Message
    tokens_before: int
    tokens_after: int
    reason: str


class ClearToolOutputs(BaseStrategy):
    """Replaces old, large tool results with a note saying what was removed.

    A tool exchange (the assistant's calls and their results) that holds a result older
    than the newest ``keep_recent`` and costing at least ``min_tokens`` becomes one
    synthetic assistant note: the calls with their arguments, each cleared result as
    ``[tool output of <tool> (<call id>) cleared by ctxwindow: <n> tokens]``, and any
    other result of the exchange verbatim. The call and its results leave together, so
    no result is ever sent without its call. Alone it then drops the oldest units if
    the history still does not fit; as a ``pipeline`` stage before others it only
    clears (see :meth:`transform`) and leaves the rest to the stages after it.
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
        """The exchanges to clear, oldest first: only those the note makes cheaper."""
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
        plan = []
        for unit in sorted(chosen):
            note, cleared = _note(history, unit, set(chosen[unit]))
            before = history.unit_tokens(unit)
            after = history.counter.count_message(note)
            if after < before:
                saved = ", ".join(f"{tool} ({call_id})" for tool, call_id in cleared)
                reason = f"tool output cleared: {saved}; {before:,} -> {after:,} tokens"
                plan.append(Clearing(unit, note, before, after, reason))
        return plan

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
                clearing = by_unit.get(unit)
                total -= clearing.tokens_after if clearing else history.unit_tokens(unit)
                dropped.add(unit)
        kept_reason = FITS_AFTER if dropped else KEPT
        for unit in range(len(history.units)):
            if unit in history.must_keep:
                continue
            if unit in dropped:
                selection.drop(unit, DROPPED)
            elif unit in by_unit:
                selection.summarize(unit, by_unit[unit].reason)
                selection.add_synthetic(by_unit[unit].note, before_unit=unit)
            else:
                selection.keep(unit, kept_reason)
        cleared = [c for c in plan if c.unit not in dropped]
        if cleared:
            before = sum(c.tokens_before for c in cleared)
            after = sum(c.tokens_after for c in cleared)
            selection.notes.append(
                f"cleared the tool output of {len(cleared)} exchange(s): "
                f"{before:,} -> {after:,} tokens"
            )
        return selection


def _note(history: History, unit: int, cleared: set[int]) -> tuple[Message, list[tuple[str, str]]]:
    """The note standing for a tool exchange, and the (tool, call id) pairs it cleared."""
    span = history.span(unit)
    call = history.messages[span.start]
    tools = {c.id: c.name for c in call.tool_calls}
    lines = [call.text] if call.text else []
    for tool_call in call.tool_calls:
        arguments = tool_call.arguments
        if len(arguments) > ARGUMENTS_SHOWN:
            arguments = arguments[:ARGUMENTS_SHOWN] + "..."
        lines.append(f"called {tool_call.name}({arguments}) as {tool_call.id}")
    done: list[tuple[str, str]] = []
    details: list[dict[str, Any]] = []
    for position in span[1:]:
        result = history.messages[position]
        call_id = result.tool_call_id or ""
        tool = tools.get(call_id) or result.name or "a tool"
        if position in cleared:
            tokens = history.tokens(position)
            lines.append(STUB.format(tool=tool, call_id=call_id, tokens=tokens))
            done.append((tool, call_id))
            details.append(
                {
                    "tool": tool,
                    "tool_call_id": call_id,
                    "position": position,
                    "id": history.message_id(position),
                    "tokens": tokens,
                    "characters": len(result.text),
                }
            )
        else:
            lines.append(f"output of {tool} ({call_id}): {result.text}")
    note = Message(
        role="assistant",
        content="\n".join(lines),
        metadata={
            "synthetic": True,
            "cleared_tool_outputs": details,
            "replaces": [{"position": p, "id": history.message_id(p)} for p in span],
        },
    )
    return note, done
