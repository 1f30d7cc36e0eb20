"""The history's budget for one request: the model's context, less the output the
request asks for, less what its tool schemas, response format and instructions take,
less the model entry's reserve.

Apps resend the same tools with every request: their counts are kept by the bytes of
their JSON, so a request pays a dump, not a count.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ctxwindow import TokenCounter
from ctxwindow_serve.settings import ModelEntry
from ctxwindow_serve.shapes import Shape

#: Schema counts kept, by the bytes of the schema's JSON.
PARTS_KEPT = 512


@dataclass(frozen=True)
class Budget:
    """How the history's budget (``left``) was found; logged with each visit."""

    context: int
    output: int
    fixed: int
    reserved: int
    #: The output limit the request itself names (``max_tokens``...), None when it names
    #: none and ``output`` is the model entry's: a span reports only what was asked.
    requested_output: int | None = None

    @property
    def left(self) -> int:
        return self.context - self.output - self.fixed - self.reserved

    def explain(self) -> str:
        return (
            f"context {self.context} - output {self.output} - tools/format/instructions "
            f"{self.fixed} - reserve {self.reserved} = {self.left}"
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "context": self.context,
            "output": self.output,
            "fixed": self.fixed,
            "reserved": self.reserved,
            "left": self.left,
        }


class PartCounts:
    """Token counts of request parts (tools, formats, instructions), least recently
    used forgotten first."""

    def __init__(self, kept: int = PARTS_KEPT) -> None:
        self._kept = kept
        self._counts: OrderedDict[tuple[str, bytes], int] = OrderedDict()

    def count(self, part: Any, counter: TokenCounter) -> int:
        text = part if isinstance(part, str) else None
        raw = text.encode() if text is not None else orjson.dumps(part)
        key = (counter.name, raw)
        found = self._counts.get(key)
        if found is not None:
            self._counts.move_to_end(key)
            return found
        counted = counter.count_text(text if text is not None else raw.decode())
        self._counts[key] = counted
        if len(self._counts) > self._kept:
            self._counts.popitem(last=False)
        return counted


def request_budget(
    body: Mapping[str, Any],
    shape: Shape,
    entry: ModelEntry,
    counter: TokenCounter,
    parts: PartCounts,
) -> Budget:
    """The budget of this request's history (its ``left`` may be zero or less)."""
    requested = shape.output_tokens(body)
    fixed = sum(parts.count(part, counter) for part in shape.fixed_parts(body))
    return Budget(
        context=entry.context,
        output=requested or entry.output,
        fixed=fixed,
        reserved=entry.reserved,
        requested_output=requested,
    )
