"""Reading the ``stages`` option: each stage a strategy looked up by name and built with
its own options, every problem named by the stage's index and name at configuration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ctxwindow
from ctxwindow import Strategy
from ctxwindow.errors import CtxWindowError, InvalidOption

PIPELINE = "pipeline"
#: Keys of a stage's table that are the pipeline's, not the stage strategy's options.
STAGE_KEYS = ("strategy", "budget_share")
EXAMPLE = '[{strategy = "clear_tool_outputs", keep_recent = 2}, {strategy = "fixed"}]'


@dataclass(frozen=True)
class Stage:
    """One configured stage: where it sits, its strategy, and who ships it."""

    index: int
    name: str
    strategy: Strategy
    distribution: str | None
    #: This stage's budget as a share of the pipeline's (None: the same budget).
    budget_share: float | None = None

    def budget(self, pipeline_budget: int) -> int:
        if self.budget_share is None:
            return pipeline_budget
        return max(1, int(pipeline_budget * self.budget_share))

    @property
    def label(self) -> str:
        return f"stages[{self.index}] {self.name}"

    @property
    def is_transform(self) -> bool:
        """A message transform: it can leave the history over budget for later stages."""
        return callable(getattr(self.strategy, "transform", None))


def build_stages(
    owner: str, specs: Sequence[Any], inherited: Mapping[str, Any] | None = None
) -> tuple[Stage, ...]:
    """Every stage built, or the first problem raised naming the stage. A stage given
    by name or table takes the ``inherited`` options (the pipeline's own, such as
    ``task_statement = false``) unless it sets them itself: each stage runs a visit of
    its own, which reads them from its strategy."""
    if not specs:
        raise InvalidOption(
            f"{owner}: option 'stages' is empty; list at least one, for example {EXAMPLE}"
        )
    given = dict(inherited or {})
    stages = tuple(_build(owner, index, spec, given) for index, spec in enumerate(specs))
    last = stages[-1]
    if last.budget_share is not None:
        raise InvalidOption(
            f"{owner}: stages[{last.index}] ({last.name!r}): 'budget_share' is for the stages "
            f"before the last; the last stage always fits the pipeline's budget"
        )
    return stages


def _build(owner: str, index: int, spec: Any, inherited: Mapping[str, Any]) -> Stage:
    where = f"{owner}: stages[{index}]"
    if isinstance(spec, Mapping):
        if "strategy" not in spec:
            raise InvalidOption(
                f"{where} has no 'strategy'; write each stage as a strategy name or a "
                f'table such as {{strategy = "fixed", max_messages = 40}}'
            )
        name = spec["strategy"]
        options = {k: v for k, v in spec.items() if k not in STAGE_KEYS}
    elif isinstance(spec, str):
        name, options = spec, {}
    elif _is_strategy(spec):  # an instance, from Python
        if _is_pipeline(type(spec)):
            raise InvalidOption(f"{where}: a pipeline cannot be a stage of a pipeline")
        return Stage(index, str(spec.name), spec, None)
    else:
        raise InvalidOption(
            f"{where} must be a strategy name, a table with 'strategy' and its options, "
            f"or a strategy object; got {type(spec).__name__} {spec!r}"
        )
    if not isinstance(name, str):
        raise InvalidOption(f"{where}: 'strategy' must be a name (str), got {name!r}")
    where = f"{where} ({name!r})"
    if name == PIPELINE:
        raise InvalidOption(
            f"{where}: a pipeline cannot be a stage of a pipeline; list its stages here instead"
        )
    described = {entry["name"]: entry for entry in ctxwindow.describe_strategies()}
    if name not in described:
        _named(where, ctxwindow.get_strategy, name)  # raises UnknownStrategy, with its hints
    known = {option["name"] for option in described[name]["options"]}
    unknown = sorted(set(options) - known)
    if unknown:
        valid = ", ".join(sorted(known)) or "none"
        raise InvalidOption(
            f"{where}: unknown option(s) {', '.join(map(repr, unknown))}; valid options: {valid}"
        )
    strategy = _named(where, ctxwindow.get_strategy, name, **{**inherited, **options})
    if _is_pipeline(type(strategy)):
        raise InvalidOption(f"{where}: a pipeline cannot be a stage of a pipeline")
    share = _share(where, spec.get("budget_share") if isinstance(spec, Mapping) else None)
    return Stage(index, name, strategy, described[name]["distribution"], share)


def _named(where: str, build: Any, *args: Any, **options: Any) -> Any:
    """``build(*args, **options)``, its errors prefixed with the stage they are about."""
    try:
        return build(*args, **options)
    except CtxWindowError as error:
        error.args = (f"{where}: {error}",)
        raise


def _share(where: str, share: Any) -> float | None:
    if share is None:
        return None
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1e6:
        raise InvalidOption(
            f"{where}: 'budget_share' must be a number > 0 and below 1,000,000 (this stage's "
            f"budget as a share of the pipeline's, such as 2.0), got {share!r}"
        )
    return float(share)


def _is_strategy(value: Any) -> bool:
    return isinstance(getattr(value, "name", None), str) and callable(
        getattr(value, "choose", None)
    )


def _is_pipeline(target: Any) -> bool:
    from ctxwindow_pipeline.pipeline import PipelineStrategy

    return isinstance(target, type) and issubclass(target, PipelineStrategy)
